/* Misuses the recorder's C ABI as a careless mod could, in one process that must survive
 * every case: NULL everywhere, every BsrsConfig range at both ends and one past each,
 * NaN and infinite values, invalid UTF-8, unwritable paths, full rings, calls after
 * finish, an older (smaller) struct_size, and free with a relay that refuses connections
 * or accepts and never answers. Each call's return code and last error are checked.
 *
 *   misuse DIR      (DIR: an empty writable folder; files are made only in it)
 *
 * Prints one line per failed check and a summary; exit status 0 when every check passed.
 * Built and run by ffi/tests/c_misuse.rs, and under qemu by scripts/cross-test.sh. */

#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <float.h>
#include <math.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bsor_stream.h"

static int checks, failures;
static const char *dir;

static void fail(int line, const char *what, const char *detail) {
    failures++;
    fprintf(stderr, "misuse.c:%d: %s: %s\n", line, what, detail);
}

static size_t last_error(char *buf, size_t len) { return bsrs_last_error(buf, len); }

/* `code` must be `want`; an error (negative) must leave a last error containing `needle`,
 * a success must leave none. */
static void expect_at(int line, const char *what, int32_t code, int32_t want,
                      const char *needle) {
    char msg[512], detail[700];
    checks++;
    size_t n = last_error(msg, sizeof msg);
    if (code != want) {
        snprintf(detail, sizeof detail, "returned %d, not %d (last error: %s)", code, want,
                 n ? msg : "none");
        fail(line, what, detail);
    } else if (want < 0 && (n == 0 || (needle && !strstr(msg, needle)))) {
        snprintf(detail, sizeof detail, "last error \"%s\" does not say \"%s\"",
                 n ? msg : "", needle ? needle : "anything");
        fail(line, what, detail);
    } else if (want >= 0 && n != 0) {
        snprintf(detail, sizeof detail, "success left the last error \"%s\"", msg);
        fail(line, what, detail);
    }
}
#define EXPECT(call, want, needle) expect_at(__LINE__, #call, (call), (want), (needle))

static void truth_at(int line, const char *what, int ok) {
    checks++;
    if (!ok) fail(line, what, "is false");
}
#define TRUE(cond) truth_at(__LINE__, #cond, (cond))

static char *path_in(const char *name) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static void info(BsrsInfo *i) {
    memset(i, 0, sizeof *i);
    i->player_name = "misuse";
    i->speed = 1.0f;
}

static BsrsConfig defaults(void) {
    BsrsConfig c;
    memset(&c, 0xAB, sizeof c); /* every field must be written */
    bsrs_config_default(&c);
    return c;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Starts with `c`: BSRS_OK (and frees at once) or the error `want` naming `needle`. */
static void start_at(int line, const char *what, const BsrsConfig *c, int32_t want,
                     const char *needle) {
    BsrsInfo i;
    info(&i);
    BsrsRecorder *rec = NULL;
    expect_at(line, what, bsrs_recorder_start(&i, c, &rec), want, needle);
    checks++;
    if ((want == BSRS_OK) != (rec != NULL)) fail(line, what, "handle and code disagree");
    bsrs_recorder_free(rec);
}
#define START_OK(c) start_at(__LINE__, #c " accepted", &(c), BSRS_OK, NULL)
#define START_BAD(c, field) start_at(__LINE__, #c " refused", &(c), BSRS_ERR_INVALID, field)

/* A 127.0.0.1 port that refuses connections (bound, then closed). */
static char *refusing_addr(void) {
    static char buf[64];
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &len);
    close(s);
    snprintf(buf, sizeof buf, "127.0.0.1:%d", ntohs(a.sin_port));
    return buf;
}

/* A 127.0.0.1 port that accepts connections (the kernel's backlog) and never answers. */
static char *silent_addr(int *fd) {
    static char buf[64];
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, (struct sockaddr *)&a, sizeof a);
    listen(s, 16);
    getsockname(s, (struct sockaddr *)&a, &len);
    *fd = s;
    snprintf(buf, sizeof buf, "127.0.0.1:%d", ntohs(a.sin_port));
    return buf;
}

static char *repeat(char ch, size_t n) {
    char *s = malloc(n + 1);
    memset(s, ch, n);
    s[n] = 0;
    return s;
}

static void null_arguments(void) {
    BsrsInfo i;
    info(&i);
    BsrsConfig c = defaults();
    BsrsRecorder *rec = NULL;
    BsrsFrame f;
    BsrsNoteEvent n;
    BsrsWall w;
    BsrsHeight h;
    BsrsPause p;
    BsrsControllerOffsets o;
    BsrsStatus st;
    memset(&f, 0, sizeof f);
    memset(&n, 0, sizeof n);
    memset(&w, 0, sizeof w);
    memset(&h, 0, sizeof h);
    memset(&p, 0, sizeof p);
    memset(&o, 0, sizeof o);
    EXPECT(bsrs_config_default(NULL), BSRS_ERR_NULL, "bsrs_config_default: NULL");
    EXPECT(bsrs_recorder_start(NULL, &c, &rec), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_recorder_start(&i, NULL, &rec), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_recorder_start(&i, &c, NULL), BSRS_ERR_NULL, "NULL");
    TRUE(rec == NULL);
    EXPECT(bsrs_push_frame(NULL, &f), BSRS_ERR_NULL, "bsrs_push_frame: NULL");
    EXPECT(bsrs_push_note(NULL, &n), BSRS_ERR_NULL, "bsrs_push_note: NULL");
    EXPECT(bsrs_push_wall(NULL, &w), BSRS_ERR_NULL, "bsrs_push_wall: NULL");
    EXPECT(bsrs_push_height(NULL, &h), BSRS_ERR_NULL, "bsrs_push_height: NULL");
    EXPECT(bsrs_push_pause(NULL, &p), BSRS_ERR_NULL, "bsrs_push_pause: NULL");
    EXPECT(bsrs_set_controller_offsets(NULL, &o), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_set_user_data(NULL, (const uint8_t *)"x", 1), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_recorder_finish(NULL, &i), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_recorder_status(NULL, &st), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_recorder_wait(NULL, 0, &st), BSRS_ERR_NULL, "NULL");
    bsrs_recorder_free(NULL);
    TRUE(last_error(NULL, 0) == 0);

    /* A live handle with NULL records. */
    EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
    EXPECT(bsrs_push_frame(rec, NULL), BSRS_ERR_NULL, "bsrs_push_frame: NULL");
    EXPECT(bsrs_push_note(rec, NULL), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_push_wall(rec, NULL), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_push_height(rec, NULL), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_push_pause(rec, NULL), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_set_controller_offsets(rec, NULL), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_set_user_data(rec, NULL, 4), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_set_user_data(rec, NULL, 0), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_status(rec, NULL), BSRS_ERR_NULL, "NULL");
    EXPECT(bsrs_recorder_finish(rec, NULL), BSRS_ERR_NULL, "NULL");
    /* The last error: its length with a NULL buffer, truncated into a small one. */
    char small[4];
    size_t full = last_error(NULL, 0);
    TRUE(full > 3);
    TRUE(last_error(small, sizeof small) == full && strlen(small) == 3);
    TRUE(last_error(small, 0) == full);
    EXPECT(bsrs_push_frame(rec, &f), BSRS_OK, NULL); /* clears it */
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_wait(rec, 10000, NULL), BSRS_OK, NULL);
    bsrs_recorder_free(rec);
    TRUE(bsrs_version() != NULL && strlen(bsrs_version()) > 0);
    TRUE(bsrs_abi_version() == BSRS_ABI_VERSION);
}

static void ranges(void) {
    BsrsConfig c;
    const char *refuse = refusing_addr();

    c = defaults();
    TRUE(c.struct_size == sizeof(BsrsConfig));
    START_OK(c);
    /* struct_size: the two layouts; nothing else. */
    size_t base = offsetof(BsrsConfig, live_ca_file);
    c.struct_size = (uint32_t)base;
    START_OK(c);
    uint32_t bad_sizes[] = {0, 4, (uint32_t)base - 1, (uint32_t)base + 1,
                            (uint32_t)sizeof c - 1, (uint32_t)sizeof c + 1,
                            (uint32_t)sizeof c + 8, 1u << 30, UINT32_MAX};
    for (size_t k = 0; k < sizeof bad_sizes / sizeof bad_sizes[0]; k++) {
        c.struct_size = bad_sizes[k];
        START_BAD(c, "struct_size");
    }

    c = defaults(); c.profile = 0; START_OK(c);
    c.profile = 2; START_OK(c);
    c.profile = 3; START_BAD(c, "profile");
    c.profile = UINT32_MAX; START_BAD(c, "profile");

    c = defaults(); c.keyframe_seconds = FLT_MIN; START_OK(c);
    c.keyframe_seconds = 3600.0f; START_OK(c);
    c.keyframe_seconds = 0.0f; START_BAD(c, "keyframe_seconds");
    c.keyframe_seconds = nextafterf(3600.0f, INFINITY); START_BAD(c, "keyframe_seconds");
    c.keyframe_seconds = NAN; START_BAD(c, "keyframe_seconds");
    c.keyframe_seconds = INFINITY; START_BAD(c, "keyframe_seconds");
    c.keyframe_seconds = -1.0f; START_BAD(c, "keyframe_seconds");

    c = defaults(); c.flush_seconds = 0.0f; START_OK(c);
    c.flush_seconds = 3600.0f; START_OK(c);
    c.flush_seconds = -FLT_MIN; START_BAD(c, "flush_seconds");
    c.flush_seconds = nextafterf(3600.0f, INFINITY); START_BAD(c, "flush_seconds");
    c.flush_seconds = NAN; START_BAD(c, "flush_seconds");
    c.flush_seconds = -INFINITY; START_BAD(c, "flush_seconds");

    c = defaults(); c.queue_capacity = 64; START_OK(c);
    c.queue_capacity = 1048576; START_OK(c);
    c.queue_capacity = 63; START_BAD(c, "queue_capacity");
    c.queue_capacity = 1048577; START_BAD(c, "queue_capacity");
    c.queue_capacity = 0; START_BAD(c, "queue_capacity");
    c.queue_capacity = UINT32_MAX; START_BAD(c, "queue_capacity");

    c = defaults(); c.on_full = 1; START_OK(c);
    c.on_full = 2; START_BAD(c, "on_full");

    c = defaults(); c.sync_each_chunk = 1; START_OK(c);
    c.sync_each_chunk = 2; START_BAD(c, "sync_each_chunk");
    c.sync_each_chunk = 255; START_BAD(c, "sync_each_chunk");

    c = defaults(); c.idle_flush_seconds = 0.0f; START_OK(c);
    c.idle_flush_seconds = FLT_MIN; START_OK(c);
    c.idle_flush_seconds = 86400.0f; START_OK(c);
    c.idle_flush_seconds = -FLT_MIN; START_BAD(c, "idle_flush_seconds");
    c.idle_flush_seconds = nextafterf(86400.0f, INFINITY); START_BAD(c, "idle_flush_seconds");
    c.idle_flush_seconds = 1e30f; START_BAD(c, "idle_flush_seconds");
    c.idle_flush_seconds = NAN; START_BAD(c, "idle_flush_seconds");
    c.idle_flush_seconds = INFINITY; START_BAD(c, "idle_flush_seconds");

    /* Paths: 1 to 4096 bytes (a path too long for the OS fails the sink, not the start). */
    char *long_path = repeat('p', 4096), *too_long = repeat('p', 4097);
    c = defaults(); c.stream_path = "/"; START_OK(c);
    c.stream_path = long_path; START_OK(c);
    c.stream_path = ""; START_BAD(c, "stream_path");
    c.stream_path = too_long; START_BAD(c, "stream_path");
    c = defaults(); c.classic_path = long_path; START_OK(c);
    c.classic_path = ""; START_BAD(c, "classic_path");
    c.classic_path = too_long; START_BAD(c, "classic_path");

    /* The live sink's strings. */
    char *addr255 = repeat('a', 255), *addr256 = repeat('a', 256);
    char *name64 = repeat('n', 64), *name65 = repeat('n', 65);
    char *token1024 = repeat('t', 1024), *token1025 = repeat('t', 1025);
    c = defaults(); c.live_addr = refuse; c.live_session = "s"; START_OK(c);
    c.live_addr = addr255; START_OK(c);
    c.live_addr = ""; START_BAD(c, "live_addr");
    c.live_addr = addr256; START_BAD(c, "live_addr");
    c.live_addr = "\xff\xfe:1"; START_BAD(c, "UTF-8");
    c = defaults(); c.live_addr = refuse; c.live_session = name64; START_OK(c);
    c.live_session = "a.b-C_9"; START_OK(c);
    c.live_session = ""; START_BAD(c, "live_session");
    c.live_session = name65; START_BAD(c, "live_session");
    c.live_session = "."; START_BAD(c, "live_session");
    c.live_session = "..."; START_BAD(c, "live_session");
    c.live_session = "a/b"; START_BAD(c, "live_session");
    c.live_session = "caf\xc3\xa9"; START_BAD(c, "live_session");
    c.live_session = "\xff"; START_BAD(c, "UTF-8");
    c.live_session = NULL; START_BAD(c, "together");
    c = defaults(); c.live_session = "s"; START_BAD(c, "together");
    c = defaults(); c.live_addr = refuse; c.live_session = "s"; c.live_token = ""; START_OK(c);
    c.live_token = token1024; START_OK(c);
    c.live_token = token1025; START_BAD(c, "live_token");
    c.live_token = "\xc3("; START_BAD(c, "UTF-8");

    c = defaults(); c.live_buffer_bytes = 65536; START_OK(c);
    c.live_buffer_bytes = 1u << 30; START_OK(c);
    c.live_buffer_bytes = 65535; START_BAD(c, "live_buffer_bytes");
    c.live_buffer_bytes = (1u << 30) + 1; START_BAD(c, "live_buffer_bytes");
    c.live_buffer_bytes = UINT64_MAX; START_BAD(c, "live_buffer_bytes");

    c = defaults(); c.live_retry_interval_ms = 10; START_OK(c);
    c.live_retry_interval_ms = 60000; START_OK(c);
    c.live_retry_interval_ms = 9; START_BAD(c, "live_retry_interval_ms");
    c.live_retry_interval_ms = 60001; START_BAD(c, "live_retry_interval_ms");
    c = defaults(); c.live_max_retries = 0; START_OK(c);
    c.live_max_retries = 10000; START_OK(c);
    c.live_max_retries = 10001; START_BAD(c, "live_max_retries");
    c = defaults(); c.live_finish_timeout_ms = 0; START_OK(c);
    c.live_finish_timeout_ms = 600000; START_OK(c);
    c.live_finish_timeout_ms = 600001; START_BAD(c, "live_finish_timeout_ms");

    c = defaults(); c.live_ca_file = path_in("ca.pem"); START_BAD(c, "TLS");

    /* Log callback and user pointer: any value is taken (not called without a message). */
    c = defaults(); c.log_user = (void *)&c; START_OK(c);

    free(long_path); free(too_long); free(addr255); free(addr256);
    free(name64); free(name65); free(token1024); free(token1025);
}

/* A mod built against an older header: its struct stops after log_user, and whatever
 * follows it in memory is not its config (here: 0xFF bytes, which as live_ca_file would be
 * refused), so the library must take the defaults past struct_size. */
typedef struct {
    uint32_t struct_size;
    uint32_t profile;
    float keyframe_seconds;
    float flush_seconds;
    uint32_t queue_capacity;
    uint32_t on_full;
    uint8_t sync_each_chunk;
    float idle_flush_seconds;
    const char *stream_path;
    const char *classic_path;
    const char *live_addr;
    const char *live_session;
    const char *live_token;
    uint64_t live_buffer_bytes;
    BsrsLogFn log;
    void *log_user;
} OldConfig;

static void old_layout(void) {
    TRUE(sizeof(OldConfig) == offsetof(BsrsConfig, live_ca_file));
    unsigned char memory[sizeof(BsrsConfig) + 64];
    memset(memory, 0xFF, sizeof memory);
    OldConfig old;
    BsrsConfig full = defaults();
    memcpy(&old, &full, sizeof old);
    old.struct_size = sizeof old;
    old.stream_path = path_in("old.bsors");
    old.profile = BSRS_PROFILE_COMPACT;
    memcpy(memory, &old, sizeof old);
    BsrsInfo i;
    info(&i);
    BsrsRecorder *rec = NULL;
    EXPECT(bsrs_recorder_start(&i, (const BsrsConfig *)(void *)memory, &rec), BSRS_OK, NULL);
    BsrsFrame f;
    memset(&f, 0, sizeof f);
    for (int k = 0; k < 90; k++) {
        f.time = (float)k / 90.0f;
        f.head.rotation.w = 1.0f;
        EXPECT(bsrs_push_frame(rec, &f), BSRS_OK, NULL);
    }
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
    BsrsStatus st;
    EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL);
    TRUE(st.stream_file == BSRS_SINK_DONE && st.encoded == 90 && st.live == BSRS_SINK_OFF);
    bsrs_recorder_free(rec);
    /* The same memory with the full size reads the 0xFF past the old struct: refused. */
    ((OldConfig *)(void *)memory)->struct_size = sizeof(BsrsConfig);
    EXPECT(bsrs_recorder_start(&i, (const BsrsConfig *)(void *)memory, &rec),
           BSRS_ERR_INVALID, NULL);
}

static void odd_values(void) {
    /* NaN, infinities, non-unit quaternions, odd event types, invalid UTF-8 in the info:
     * recorded as given, in every profile. */
    for (uint32_t profile = 0; profile <= 2; profile++) {
        BsrsConfig c = defaults();
        char name[64];
        snprintf(name, sizeof name, "odd-%u.bsors", profile);
        c.stream_path = path_in(name);
        c.profile = profile;
        BsrsInfo i;
        info(&i);
        i.player_name = "\xff\xfe not UTF-8 \xc3";
        i.song_name = "";
        i.jump_distance = NAN;
        i.speed = INFINITY;
        BsrsRecorder *rec = NULL;
        EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
        float odd[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN};
        int n_odd = sizeof odd / sizeof odd[0];
        BsrsFrame f;
        memset(&f, 0, sizeof f);
        for (int k = 0; k < 200; k++) {
            float v = odd[k % n_odd];
            f.time = k % 50 == 49 ? NAN : (float)k / 90.0f;
            f.fps = k % 3 == 0 ? -1 : 90;
            f.head.position.x = v;
            f.head.rotation.x = v;
            f.left_hand.rotation.w = 2.0f;
            f.right_hand.position.y = -v;
            EXPECT(bsrs_push_frame(rec, &f), BSRS_OK, NULL);
        }
        BsrsNoteEvent n;
        memset(&n, 0, sizeof n);
        int32_t types[] = {0, 1, 2, 3, 4, -1, 99, INT32_MIN};
        for (int k = 0; k < 8; k++) {
            n.event_type = types[k];
            n.event_time = odd[k];
            n.cut.saber_speed = odd[(k + 1) % n_odd];
            EXPECT(bsrs_push_note(rec, &n), BSRS_OK, NULL);
        }
        BsrsWall w = {INT32_MIN, NAN, INFINITY, -INFINITY};
        EXPECT(bsrs_push_wall(rec, &w), BSRS_OK, NULL);
        BsrsHeight h = {NAN, -1.0f};
        EXPECT(bsrs_push_height(rec, &h), BSRS_OK, NULL);
        BsrsPause p = {INT64_MIN, NAN};
        EXPECT(bsrs_push_pause(rec, &p), BSRS_OK, NULL);
        BsrsControllerOffsets o;
        memset(&o, 0xFF, sizeof o); /* NaNs */
        EXPECT(bsrs_set_controller_offsets(rec, &o), BSRS_OK, NULL);
        EXPECT(bsrs_set_user_data(rec, (const uint8_t *)"\0\xff", 2), BSRS_OK, NULL);
        i.modifiers = "FS,NF,a much longer modifier string than at the start";
        EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
        BsrsStatus st;
        EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL);
        TRUE(st.stream_file == BSRS_SINK_DONE && st.encoded == st.accepted);
        bsrs_recorder_free(rec);
    }
    /* User data beyond its bound is refused before it is read. */
    BsrsConfig c = defaults();
    BsrsInfo i;
    info(&i);
    BsrsRecorder *rec = NULL;
    EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
    size_t big = (16u << 20) + 1;
    uint8_t *data = calloc(big, 1);
    EXPECT(bsrs_set_user_data(rec, data, big), BSRS_ERR_INVALID, "bsrs_set_user_data");
    EXPECT(bsrs_set_user_data(rec, data, big - 1), BSRS_OK, NULL);
    free(data);
    bsrs_recorder_free(rec);
}

static void unwritable_paths(void) {
    /* A folder where a file should be, a path under a plain file, a missing folder. */
    FILE *plain = fopen(path_in("plain"), "w");
    if (plain) fclose(plain);
    BsrsConfig c = defaults();
    c.stream_path = dir;
    c.classic_path = path_in("plain/song.bsor");
    BsrsInfo i;
    info(&i);
    BsrsRecorder *rec = NULL;
    EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
    BsrsFrame f;
    memset(&f, 0, sizeof f);
    EXPECT(bsrs_push_frame(rec, &f), BSRS_OK, NULL);
    BsrsStatus st;
    for (int k = 0; k < 2000; k++) {
        bsrs_recorder_status(rec, &st);
        if (st.stream_file == BSRS_SINK_FAILED && st.classic == BSRS_SINK_FAILED) break;
        sleep_ms(1);
    }
    TRUE(st.stream_file == BSRS_SINK_FAILED && st.classic == BSRS_SINK_FAILED);
    /* The status hands over the failed sink's message as the last error. */
    char msg[512];
    TRUE(bsrs_recorder_status(rec, &st) == BSRS_OK);
    TRUE(last_error(msg, sizeof msg) > 0 && strstr(msg, "plain") != NULL);
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL);
    bsrs_recorder_free(rec);
    /* A path that is not UTF-8 is taken as the bytes it is (Unix). */
    c = defaults();
    c.stream_path = path_in("\xff\xfe.bsors");
    EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL);
    TRUE(st.stream_file == BSRS_SINK_DONE);
    bsrs_recorder_free(rec);
    FILE *odd = fopen(path_in("\xff\xfe.bsors"), "rb");
    TRUE(odd != NULL);
    if (odd) fclose(odd);
    c = defaults();
    c.stream_path = path_in("missing/folder/song.bsors");
    EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL);
    TRUE(st.stream_file == BSRS_SINK_FAILED);
    bsrs_recorder_free(rec);
}

static void full_rings(void) {
    for (uint32_t mode = 0; mode <= 1; mode++) {
        BsrsConfig c = defaults();
        c.queue_capacity = 64;
        c.on_full = mode;
        BsrsInfo i;
        info(&i);
        BsrsRecorder *rec = NULL;
        EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
        BsrsFrame f;
        memset(&f, 0, sizeof f);
        uint64_t ok = 0, dropped = 0, full = 0, other = 0;
        for (int k = 0; k < 100000; k++) {
            f.time = (float)k / 90.0f;
            int32_t r = bsrs_push_frame(rec, &f);
            if (r == BSRS_OK) ok++;
            else if (r == BSRS_DROPPED) dropped++;
            else if (r == BSRS_FULL) full++;
            else other++;
        }
        TRUE(other == 0);
        TRUE(mode == 0 ? dropped > 0 && full == 0 : full > 0 && dropped == 0);
        TRUE(last_error(NULL, 0) == 0); /* a full ring is not an error */
        BsrsStatus st;
        EXPECT(bsrs_recorder_status(rec, &st), BSRS_OK, NULL);
        TRUE(st.accepted == ok && st.dropped == dropped && st.refused == full);
        EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
        EXPECT(bsrs_recorder_wait(rec, 30000, &st), BSRS_OK, NULL);
        TRUE(st.encoded == ok);
        bsrs_recorder_free(rec);
    }
}

static void after_finish(void) {
    BsrsConfig c = defaults();
    BsrsInfo i;
    info(&i);
    BsrsRecorder *rec = NULL;
    EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
    BsrsFrame f;
    BsrsNoteEvent n;
    BsrsWall w;
    BsrsHeight h;
    BsrsPause p;
    BsrsControllerOffsets o;
    memset(&f, 0, sizeof f);
    memset(&n, 0, sizeof n);
    memset(&w, 0, sizeof w);
    memset(&h, 0, sizeof h);
    memset(&p, 0, sizeof p);
    memset(&o, 0, sizeof o);
    EXPECT(bsrs_push_frame(rec, &f), BSRS_CLOSED, "bsrs_push_frame: the recorder is finished");
    EXPECT(bsrs_push_note(rec, &n), BSRS_CLOSED, "finished");
    EXPECT(bsrs_push_wall(rec, &w), BSRS_CLOSED, "finished");
    EXPECT(bsrs_push_height(rec, &h), BSRS_CLOSED, "finished");
    EXPECT(bsrs_push_pause(rec, &p), BSRS_CLOSED, "finished");
    EXPECT(bsrs_set_controller_offsets(rec, &o), BSRS_CLOSED, "finished");
    EXPECT(bsrs_set_user_data(rec, (const uint8_t *)"x", 1), BSRS_CLOSED, "finished");
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_CLOSED, "finished");
    BsrsStatus st;
    int32_t r = bsrs_recorder_wait(rec, 0, &st);
    TRUE(r == BSRS_OK || r == BSRS_TIMEOUT);
    EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL); /* again */
    TRUE(st.ended == 1);
    EXPECT(bsrs_push_frame(rec, &f), BSRS_CLOSED, "finished");
    bsrs_recorder_free(rec);
}

/* The live sink against a relay that refuses, and one that accepts and never answers:
 * it says it is not connected, and free returns (whatever the network does). */
static void unreachable_relays(void) {
    int silent_fd = -1;
    const char *addrs[2];
    char refuse[64], silent[64];
    snprintf(refuse, sizeof refuse, "%s", refusing_addr());
    snprintf(silent, sizeof silent, "%s", silent_addr(&silent_fd));
    addrs[0] = refuse;
    addrs[1] = silent;
    for (int a = 0; a < 2; a++) {
        for (int finish = 0; finish <= 1; finish++) {
            BsrsConfig c = defaults();
            c.live_addr = addrs[a];
            c.live_session = "misuse";
            c.live_retry_interval_ms = 10;
            c.live_max_retries = 10000;
            c.stream_path = path_in(a ? "silent.bsors" : "refused.bsors");
            BsrsInfo i;
            info(&i);
            BsrsRecorder *rec = NULL;
            EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
            BsrsFrame f;
            memset(&f, 0, sizeof f);
            for (int k = 0; k < 300; k++) {
                f.time = (float)k / 90.0f;
                EXPECT(bsrs_push_frame(rec, &f), BSRS_OK, NULL);
            }
            BsrsStatus st;
            for (int k = 0; k < 5000; k++) {
                bsrs_recorder_status(rec, &st);
                if (st.live != BSRS_SINK_OFF) break;
                sleep_ms(1);
            }
            TRUE(st.live == BSRS_SINK_CONNECTING);
            sleep_ms(50);
            EXPECT(bsrs_recorder_status(rec, &st), BSRS_OK, NULL);
            TRUE(st.live == BSRS_SINK_CONNECTING);
            if (finish) {
                EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
                TRUE(bsrs_recorder_wait(rec, 20, &st) == BSRS_TIMEOUT);
            }
            bsrs_recorder_free(rec);
        }
    }
    /* A sink that gives up: BSRS_SINK_FAILED with a message, the file goes on. */
    BsrsConfig c = defaults();
    c.live_addr = refuse;
    c.live_session = "misuse";
    c.live_retry_interval_ms = 10;
    c.live_max_retries = 2;
    c.stream_path = path_in("gave-up.bsors");
    BsrsInfo i;
    info(&i);
    BsrsRecorder *rec = NULL;
    EXPECT(bsrs_recorder_start(&i, &c, &rec), BSRS_OK, NULL);
    BsrsFrame f;
    memset(&f, 0, sizeof f);
    EXPECT(bsrs_push_frame(rec, &f), BSRS_OK, NULL);
    BsrsStatus st;
    for (int k = 0; k < 10000; k++) {
        bsrs_recorder_status(rec, &st);
        if (st.live == BSRS_SINK_FAILED) break;
        sleep_ms(1);
    }
    TRUE(st.live == BSRS_SINK_FAILED);
    TRUE(st.stream_file == BSRS_SINK_RUNNING);
    char msg[512];
    bsrs_recorder_status(rec, &st);
    TRUE(last_error(msg, sizeof msg) > 0 && strstr(msg, "live") != NULL);
    EXPECT(bsrs_recorder_finish(rec, &i), BSRS_OK, NULL);
    EXPECT(bsrs_recorder_wait(rec, 10000, &st), BSRS_OK, NULL);
    TRUE(st.stream_file == BSRS_SINK_DONE && st.live == BSRS_SINK_FAILED);
    bsrs_recorder_free(rec);
    close(silent_fd);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: misuse DIR\n");
        return 2;
    }
    dir = argv[1];
    null_arguments();
    ranges();
    old_layout();
    odd_values();
    unwritable_paths();
    full_rings();
    after_finish();
    unreachable_relays();
    printf("misuse: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
