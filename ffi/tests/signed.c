/* A signed recording through the C ABI: the player's key in BsrsConfig::signing_key, a
 * few seconds of frames and notes, a stream file and a classic file. tests/c_signed.rs
 * builds and runs it, then verifies both files. Usage: signed OUT.bsors OUT.bsor */
#include <stdio.h>
#include <string.h>

#include "bsor_stream.h"

static int check(const char *what, int32_t code) {
    if (code == BSRS_OK) return 1;
    char msg[256];
    bsrs_last_error(msg, sizeof msg);
    fprintf(stderr, "signed: %s failed with %d: %s\n", what, code, msg);
    return 0;
}

static void info(BsrsInfo *i, int32_t score) {
    memset(i, 0, sizeof *i);
    i->version = "0.9.0";
    i->game_version = "1.37.1";
    i->timestamp = "1763800000";
    i->player_id = "76561198000000001";
    i->player_name = "C signed";
    i->platform = "oculus";
    i->hash = "0123456789ABCDEF0123456789ABCDEF01234567";
    i->song_name = "Synthetic";
    i->difficulty = "ExpertPlus";
    i->mode = "Standard";
    i->score = score;
    i->speed = 1.0f;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: signed OUT.bsors OUT.bsor\n");
        return 2;
    }
    /* The test key (32 bytes of 0x42, never a real one). A mod reads the player's seed
     * from the player's own storage and wipes its copy once the recorder has started. */
    uint8_t seed[32];
    memset(seed, 0x42, sizeof seed);
    BsrsConfig cfg;
    bsrs_config_default(&cfg);
    cfg.stream_path = argv[1];
    cfg.classic_path = argv[2];
    cfg.signing_key = seed;
    BsrsInfo start;
    info(&start, 0);

    /* A lossy profile cannot be signed: bad settings. */
    BsrsRecorder *rec = NULL;
    cfg.profile = BSRS_PROFILE_COMPACT;
    if (bsrs_recorder_start(&start, &cfg, &rec) != BSRS_ERR_INVALID || rec != NULL) {
        fprintf(stderr, "signed: a lossy signed recording started\n");
        return 1;
    }
    cfg.profile = BSRS_PROFILE_LOSSLESS;
    if (!check("bsrs_recorder_start", bsrs_recorder_start(&start, &cfg, &rec))) return 1;
    memset(seed, 0, sizeof seed);

    const int fps = 90, frames = 6 * 90;
    int32_t score = 0;
    for (int k = 0; k < frames; k++) {
        float t = (float)k / (float)fps;
        BsrsFrame f;
        memset(&f, 0, sizeof f);
        f.time = t;
        f.fps = fps;
        f.head.position.y = 1.7f + 0.01f * (float)(k % 10);
        f.head.rotation.w = 1.0f;
        f.left_hand.position.x = -0.3f + 0.001f * (float)k;
        f.left_hand.rotation.w = 1.0f;
        f.right_hand.position.x = 0.3f - 0.001f * (float)k;
        f.right_hand.rotation.w = 1.0f;
        if (k % 45 == 0 && k > 0) {
            BsrsNoteEvent n;
            memset(&n, 0, sizeof n);
            n.note_id = 30000 + k;
            n.event_time = t;
            n.spawn_time = t - 0.8f;
            n.event_type = 0;
            n.cut.speed_ok = n.cut.direction_ok = n.cut.saber_type_ok = 1;
            n.cut.saber_speed = 5.0f;
            n.cut.before_cut_rating = 1.0f;
            n.cut.after_cut_rating = 1.0f;
            score += 115;
            if (!check("bsrs_push_note", bsrs_push_note(rec, &n))) return 1;
        }
        if (!check("bsrs_push_frame", bsrs_push_frame(rec, &f))) return 1;
    }
    BsrsControllerOffsets o;
    memset(&o, 0, sizeof o);
    o.left.position.z = 0.01f;
    o.left.rotation.w = 1.0f;
    o.right.rotation.w = 1.0f;
    bsrs_set_controller_offsets(rec, &o);
    BsrsInfo end;
    info(&end, score);
    if (!check("bsrs_recorder_finish", bsrs_recorder_finish(rec, &end))) return 1;
    BsrsStatus st;
    if (!check("bsrs_recorder_wait", bsrs_recorder_wait(rec, 30000, &st))) return 1;
    bsrs_recorder_free(rec);
    if (st.stream_file != BSRS_SINK_DONE || st.classic != BSRS_SINK_DONE) {
        fprintf(stderr, "signed: sinks %u %u\n", (unsigned)st.stream_file, (unsigned)st.classic);
        return 1;
    }
    return 0;
}
