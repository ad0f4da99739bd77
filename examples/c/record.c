/* Records a synthetic song through the C ABI, as a game mod would: a frame per tick, events
 * as they happen, then the final info, into a .bsors stream and a classic .bsor.
 *
 *   record OUT.bsors OUT.bsor [SECONDS]
 *
 * The motion uses only + - * / and sqrtf, which IEEE 754 fixes, so the same program gives
 * the same stream bytes on every architecture (scripts/cross-test.sh compares them).
 * Exit status: 0 when both files are complete, 1 otherwise. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bsor_stream.h"

/* Called on the recorder's background threads, never on the thread that pushes, and one
 * call at a time (see BsrsLogFn): it needs no lock of its own for that. */
static void log_cb(void *user, int32_t level, const char *message) {
    (void)user;
    fprintf(stderr, "record: [%d] %s\n", level, message);
}

/* A triangle wave in [-1, 1] with period 1 (in units of t). */
static float tri(float t) {
    float f = t - (float)(long)t;
    if (f < 0) f += 1.0f;
    return f < 0.5f ? 4.0f * f - 1.0f : 3.0f - 4.0f * f;
}

static BsrsQuat rotation(float a, float b) {
    BsrsQuat q = {0.1f * a, 0.3f + 0.05f * b, -0.02f * a * b, 0.95f};
    float n = sqrtf(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w);
    q.x /= n;
    q.y /= n;
    q.z /= n;
    q.w /= n;
    return q;
}

static BsrsPose pose(float x, float y, float z, float t, float phase) {
    BsrsPose p;
    p.position.x = x + 0.2f * tri(t * 0.5f + phase);
    p.position.y = y + 0.1f * tri(t * 0.75f + phase);
    p.position.z = z + 0.05f * tri(t * 0.3f + phase);
    p.rotation = rotation(tri(t * 0.4f + phase), tri(t * 0.9f + phase));
    return p;
}

static void info(BsrsInfo *i, int32_t score, float fail_time) {
    memset(i, 0, sizeof *i);
    i->version = "0.9.0";
    i->game_version = "1.37.1";
    i->timestamp = "1763800000";
    i->player_id = "76561198000000000";
    i->player_name = "C example";
    i->platform = "oculus";
    i->tracking_system = "Oculus";
    i->hmd = "Quest 3";
    i->controller = "Touch";
    i->hash = "0123456789ABCDEF0123456789ABCDEF01234567";
    i->song_name = "Synthetic";
    i->mapper = "bsor-stream";
    i->difficulty = "ExpertPlus";
    i->score = score;
    i->mode = "Standard";
    i->environment = "DefaultEnvironment";
    i->modifiers = "";
    i->jump_distance = 18.0f;
    i->left_handed = 0;
    i->height = 1.75f;
    i->start_time = 0.0f;
    i->fail_time = fail_time;
    i->speed = 1.0f;
}

static int check(const char *what, int32_t code) {
    if (code == BSRS_OK) return 1;
    char msg[256];
    bsrs_last_error(msg, sizeof msg);
    fprintf(stderr, "record: %s failed with %d: %s\n", what, code, msg);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: record OUT.bsors OUT.bsor [SECONDS]\n");
        return 2;
    }
    float seconds = argc > 3 ? (float)atof(argv[3]) : 20.0f;
    BsrsConfig cfg;
    bsrs_config_default(&cfg);
    cfg.stream_path = argv[1];
    cfg.classic_path = argv[2];
    cfg.log = log_cb;
    /* Chunk boundaries by song time alone, so that the bytes do not depend on how the
     * threads were scheduled (scripts/cross-test.sh compares them across architectures).
     * A game keeps the default, so that a pause does not hold back the last chunk. */
    cfg.idle_flush_seconds = 0.0f;

    BsrsInfo start;
    info(&start, 0, 0.0f);
    BsrsRecorder *rec = NULL;
    if (!check("bsrs_recorder_start", bsrs_recorder_start(&start, &cfg, &rec))) return 1;

    const int fps = 90;
    int frames = (int)(seconds * (float)fps);
    int32_t score = 0;
    int next_note = 0;
    for (int k = 0; k < frames; k++) {
        float t = (float)k / (float)fps;
        BsrsFrame f;
        f.time = t;
        f.fps = fps;
        f.head = pose(0.0f, 1.7f, 0.0f, t, 0.0f);
        f.left_hand = pose(-0.3f, 1.2f, 0.3f, t, 0.25f);
        f.right_hand = pose(0.3f, 1.2f, 0.3f, t, 0.5f);
        /* A note every half second: mostly good cuts, every seventh a miss. */
        if (t >= 0.5f * (float)next_note + 1.0f) {
            BsrsNoteEvent n;
            memset(&n, 0, sizeof n);
            n.note_id = 30000 + (next_note % 4) * 100 + (next_note % 3) * 10 + (next_note % 2);
            n.event_time = t;
            n.spawn_time = t - 0.8f;
            n.event_type = next_note % 7 == 6 ? 2 : 0;
            if (n.event_type == 0) {
                n.cut.speed_ok = n.cut.direction_ok = n.cut.saber_type_ok = 1;
                n.cut.saber_speed = 5.0f + tri(t);
                n.cut.saber_dir = (BsrsVec3){0.0f, -1.0f, 0.0f};
                n.cut.saber_type = next_note % 2;
                n.cut.time_deviation = 0.01f * tri(t * 3.0f);
                n.cut.cut_point = f.right_hand.position;
                n.cut.cut_normal = (BsrsVec3){1.0f, 0.0f, 0.0f};
                n.cut.cut_distance_to_center = 0.05f;
                n.cut.cut_angle = 100.0f;
                n.cut.before_cut_rating = 1.0f;
                n.cut.after_cut_rating = 0.9f;
                score += 110;
            }
            bsrs_push_note(rec, &n);
            next_note++;
        }
        if (k == frames / 2) {
            BsrsWall w = {400001, 0.9f, t, t - 1.0f};
            bsrs_push_wall(rec, &w);
            BsrsHeight h = {1.74f, t};
            bsrs_push_height(rec, &h);
        }
        int32_t r = bsrs_push_frame(rec, &f);
        if (r != BSRS_OK) fprintf(stderr, "record: frame %d: %d\n", k, r);
    }
    BsrsPause p = {3, seconds * 0.75f};
    bsrs_push_pause(rec, &p);
    BsrsControllerOffsets o;
    memset(&o, 0, sizeof o);
    o.left.rotation.w = 1.0f;
    o.right.rotation.w = 1.0f;
    bsrs_set_controller_offsets(rec, &o);
    const char user[] = "{\"recordedBy\":\"examples/c/record.c\"}";
    bsrs_set_user_data(rec, (const uint8_t *)user, strlen(user));

    BsrsInfo end;
    info(&end, score, 0.0f);
    if (!check("bsrs_recorder_finish", bsrs_recorder_finish(rec, &end))) return 1;
    BsrsStatus st;
    if (!check("bsrs_recorder_wait", bsrs_recorder_wait(rec, 60000, &st))) return 1;
    printf("frames+events %llu, dropped %llu, stream %llu bytes, stream file %u, classic %u\n",
           (unsigned long long)st.accepted, (unsigned long long)st.dropped,
           (unsigned long long)st.stream_bytes, st.stream_file, st.classic);
    bsrs_recorder_free(rec);
    return st.stream_file == BSRS_SINK_DONE && st.classic == BSRS_SINK_DONE ? 0 : 1;
}
