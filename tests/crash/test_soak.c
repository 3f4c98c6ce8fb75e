/* test_soak: the kill soak. Rounds of one producer and five consumers of
 * its blocks, on the simulated machine, all under the shim. In each round
 * four consumers are SIGKILLed at random moments -- with IPCSHIM_TEST_DELAY_US
 * in most rounds, so that many kills land inside the registry's critical
 * sections -- while the producer frees its blocks at random moments; in every
 * fourth round the producer is SIGKILLed too. One consumer survives each
 * round and reads throughout. Some rounds start killing before the consumers
 * have opened anything (hand-offs may stay unclaimed).
 *
 * After every round:
 *   - no consumer of a live exporter read anything but the pattern
 *     (soak.c's consumers exit 3 on poison, 4 on other bytes): "lost";
 *   - a live producer's first ipcshim_collect() after its last free brings
 *     cudaMemGetInfo back to its baseline when every hand-off was claimed
 *     (the rounds that waited for "ready"; in half of them the producer has
 *     no collector thread, so that collect alone must do it; in the others
 *     the thread may be finishing the same frees), and an allocation
 *     failure's pressure collect does it otherwise;
 *   - a fresh process exports, has a child open/verify/close, frees and
 *     collects: the registry still tracks, and the device is empty again;
 *   - the registry then holds no block, lease or holder record: "leaked".
 *
 * IPCSHIM_SOAK_ROUNDS sets the number of rounds (default 60, about 255
 * kills); docs/crash-safety.md has the long mode. The control test shows
 * that the consumers do see poison when nothing protects them. */
#include "crash.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CONSUMERS 5 /* the last one survives the round */
#define VICTIMS (CONSUMERS - 1)
#define BLOCKS 4
#define BLOCK_SIZE "262144"
#define WINDOW_MS 150

/* Criterion runs each test in a worker whose stdout and stderr are
 * /dev/null in TAP mode: the soak's round lines and summary go to
 * CRASH_BIN_DIR/soak.log (build/tests/crash/soak.log), and to stderr when
 * the binary is run by hand. */
static FILE *report;
static void open_report(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/soak.log",
             getenv("CRASH_BIN_DIR") ? getenv("CRASH_BIN_DIR") : ".");
    report = fopen(path, "w");
    if (report) setvbuf(report, NULL, _IOLBF, 0);
}
#define say(...)                                                                                   \
    do {                                                                                           \
        if (report) fprintf(report, __VA_ARGS__);                                                  \
        fprintf(stderr, __VA_ARGS__);                                                              \
    } while (0)

static void setup(void)
{
    crash_setup("soak");
}
TestSuite(soak, .init = setup, .fini = crash_cleanup);

struct totals {
    int rounds, kills, consumer_kills, producer_kills, early_rounds, delayed_rounds;
    int lost, leaked, poison_after_death, not_reclaimed_by_collect, pressure_reclaims;
    unsigned repairs;
    long opens, refused;
};

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static void sleep_until(long t)
{
    long d = t - now_ms();
    if (d > 0) usleep((useconds_t)d * 1000);
}

/* Records still in the registry; every process of the round is gone and a
 * fresh one swept, so any is a leak. */
static int registry_records(unsigned *repairs)
{
    struct reg_counts n;
    if (crash_registry_counts(&n, 0) != 0) return -1;
    *repairs = n.repairs;
    return n.holders + n.blocks + n.leases;
}

/* Checks a consumer's output for data that was not the pattern. */
static int lost_in(const struct child *c, int k)
{
    int n =
        count_lines(c->buf, "POISON") + count_lines(c->buf, "WRONG") + count_lines(c->buf, "ERROR");
    if (n) say("soak: consumer %d: %s", k, c->buf);
    return n;
}

static void round_once(int round, unsigned *seed, struct totals *t)
{
    static struct child prod, cons[CONSUMERS], chk;
    char line[512], salt[16], flag[256], delay_env[64], cseed[CONSUMERS][16];
    char hex[BLOCKS][129];
    bool kill_producer = round % 4 == 3, early = round % 5 == 2;
    int delay_us = (int[]){0, 200, 1000, 3000}[rand_r(seed) % 4];
    snprintf(salt, sizeof salt, "%u", rand_r(seed));
    snprintf(flag, sizeof flag, "/tmp/%s-exporter-dead", crash_domain());
    snprintf(delay_env, sizeof delay_env, "IPCSHIM_TEST_DELAY_US=%d", delay_us);
    unlink(flag);
    t->rounds++;
    t->early_rounds += early;
    t->delayed_rounds += delay_us > 0;

    /* Hand-offs that nobody claims would otherwise hold blocks for 30 s. */
    const char *const env[] = {delay_env, "IPCSHIM_LOG=error", NULL};
    /* Half the producers run without the collector thread: then their
     * first collect is the only thing that can free, and must. */
    bool collector = round % 2 == 0;
    const char *const prod_env[] = {delay_env, "IPCSHIM_LOG=error",
                                    collector ? NULL : "IPCSHIM_COLLECTOR=0", NULL};
    cr_assert_eq(
        child_spawn(&prod, "soak", true, prod_env, ARGS("producer", salt, "4", BLOCK_SIZE)), 0);
    for (int got = 0; got < BLOCKS + 1;) {
        int r = child_line(&prod, line, sizeof line, 10000);
        cr_assert_eq(r, 1, "round %d: the producer did not start: %s", round, prod.buf);
        int k;
        char h[129];
        if (sscanf(line, "handle %d %128s", &k, h) == 2 && k >= 0 && k < BLOCKS)
            strcpy(hex[k], h), got++;
        else if (!strcmp(line, "ready"))
            got++;
    }
    long start = now_ms();
    for (int k = 0; k < CONSUMERS; k++) {
        snprintf(cseed[k], sizeof cseed[k], "%u", rand_r(seed));
        const char *args[] = {"consumer", salt,   BLOCK_SIZE, cseed[k], flag,
                              hex[0],     hex[1], hex[2],     hex[3],   NULL};
        cr_assert_eq(child_spawn(&cons[k], "soak", true, env, args), 0);
    }
    if (!early) { /* every block opened by someone: every hand-off claimed */
        for (int k = 0; k < CONSUMERS; k++) {
            int r;
            while ((r = child_line(&cons[k], line, sizeof line, 10000)) == 1 &&
                   strcmp(line, "ready")) {
            }
            cr_assert_eq(r, 1, "round %d: consumer %d never opened every block: %s", round, k,
                         cons[k].buf);
        }
        start = now_ms();
    }

    /* The schedule: kills and frees at random moments in the window. */
    struct event {
        long at;
        int what; /* 0..VICTIMS-1 kill a consumer, VICTIMS kill the producer, 100+k free block k */
    } ev[VICTIMS + 1 + BLOCKS];
    int nev = 0;
    for (int k = 0; k < VICTIMS; k++)
        ev[nev++] = (struct event){start + (long)(rand_r(seed) % WINDOW_MS), k};
    if (kill_producer)
        ev[nev++] = (struct event){start + (long)(rand_r(seed) % WINDOW_MS), VICTIMS};
    for (int b = 0; b < BLOCKS; b++)
        if (rand_r(seed) % 4)
            ev[nev++] = (struct event){start + (long)(rand_r(seed) % WINDOW_MS), 100 + b};
    for (int i = 1; i < nev; i++)
        for (int j = i; j > 0 && ev[j].at < ev[j - 1].at; j--) {
            struct event x = ev[j];
            ev[j] = ev[j - 1], ev[j - 1] = x;
        }
    bool producer_dead = false;
    for (int i = 0; i < nev; i++) {
        sleep_until(ev[i].at);
        if (ev[i].what < VICTIMS) {
            kill(cons[ev[i].what].pid, SIGKILL);
        } else if (ev[i].what == VICTIMS) {
            FILE *f = fopen(flag, "w"); /* before the kill: a consumer that reads poison sees it */
            cr_assert(f);
            fclose(f);
            kill(prod.pid, SIGKILL);
            producer_dead = true;
        } else if (!producer_dead) {
            snprintf(line, sizeof line, "free %d", ev[i].what - 100);
            child_send(&prod, line);
        }
    }

    for (int k = 0; k < VICTIMS; k++) {
        int st = child_wait(&cons[k], 10000);
        t->lost += lost_in(&cons[k], k);
        if (st == 128 + SIGKILL)
            t->kills++, t->consumer_kills++;
        else
            cr_expect_eq(st, 128 + SIGKILL, "round %d: consumer %d exited %d before its kill: %s",
                         round, k, st, cons[k].buf);
    }
    /* The survivor closes everything and reports. */
    struct child *s = &cons[VICTIMS];
    child_close_stdin(s);
    int r;
    while ((r = child_line(s, line, sizeof line, 10000)) == 1 && strncmp(line, "done", 4)) {
    }
    cr_expect_eq(r, 1, "round %d: the surviving consumer did not finish: %s", round, s->buf);
    long opens = 0, refused = 0;
    int dead_reads = 0;
    sscanf(line, "done opens=%ld refused=%ld dead_reads=%d", &opens, &refused, &dead_reads);
    t->opens += opens, t->refused += refused, t->poison_after_death += dead_reads;
    cr_expect_eq(child_wait(s, 10000), 0, "round %d: the survivor: %s", round, s->buf);
    t->lost += lost_in(s, VICTIMS);

    if (producer_dead) {
        child_wait(&prod, 10000);
        t->kills++, t->producer_kills++;
    } else {
        /* Its first collect after the last free must bring the memory back
         * when every hand-off was claimed. */
        child_send(&prod, "final");
        size_t fin = 0, base = 1, pressure = 0, settled = 0;
        int collected = 0;
        bool got_final = false, got_pressure = false;
        while (child_line(&prod, line, sizeof line, 10000) == 1 && strcmp(line, "bye")) {
            if (sscanf(line, "final collect=%d free=%zu baseline=%zu", &collected, &fin, &base) ==
                3)
                got_final = true;
            if (sscanf(line, "settled free=%zu", &settled) == 1 && collector) fin = settled;
            if (sscanf(line, "pressure free=%zu", &pressure) == 1) got_pressure = true;
        }
        cr_expect(got_final, "round %d: no final report: %s", round, prod.buf);
        if (got_final && fin < base) {
            t->not_reclaimed_by_collect++;
            if (!early) {
                t->leaked++;
                say("soak: round %d: %zu bytes not back after the first collect\n", round,
                    base - fin);
            } else if (got_pressure && pressure >= base) {
                t->pressure_reclaims++;
            } else {
                t->leaked++;
                say("soak: round %d: %zu bytes not back even under pressure\n", round,
                    base - pressure);
            }
        }
        cr_expect_eq(child_wait(&prod, 15000), 0, "round %d: producer: %s", round, prod.buf);
    }

    /* A fresh process: the registry works, the device is empty, and its
     * collect sweeps whatever the dead left. */
    char csalt[16];
    snprintf(csalt, sizeof csalt, "%u", rand_r(seed));
    cr_assert_eq(child_spawn(&chk, "soak", true, ENV("IPCSHIM_LOG=error"), ARGS("check", csalt)),
                 0);
    r = child_line(&chk, line, sizeof line, 15000);
    child_wait(&chk, 15000);
    int active = -1;
    unsigned long long exports = 0;
    size_t cfree = 0, ctotal = 1;
    char cstate[32] = "";
    cr_assert_eq(r, 1, "round %d: no check report: %s", round, chk.buf);
    cr_assert_eq(sscanf(line, "check active=%d exports=%llu child=%31s free=%zu total=%zu", &active,
                        &exports, cstate, &cfree, &ctotal),
                 5, "round %d: %s", round, line);
    cr_expect_eq(active, 1, "round %d: the registry no longer tracks: %s", round, line);
    cr_expect_eq(exports, 1, "round %d: %s", round, line);
    cr_expect_str_eq(cstate, "ok", "round %d: %s", round, line);
    if (cfree != ctotal) {
        t->leaked++;
        say("soak: round %d: device memory not back: %zu of %zu free\n", round, cfree, ctotal);
    }
    unsigned repairs = 0;
    int left = registry_records(&repairs);
    cr_expect_eq(left, 0, "round %d: %d registry records left after the final sweep", round, left);
    if (left > 0) t->leaked += left;
    t->repairs = repairs;
    unlink(flag);
    say("soak: round %d%s%s%s delay %dus: kills %d, lost %d, leaked %d, lock repairs %u\n", round,
        early ? " (early)" : "", kill_producer ? " (producer killed)" : "",
        collector ? "" : " (no collector)", delay_us, t->kills, t->lost, t->leaked, repairs);
}

Test(soak, kill_producer_and_consumers_at_random, .timeout = 7200)
{
    open_report();
    const char *env = getenv("IPCSHIM_SOAK_ROUNDS");
    int rounds = env && atoi(env) > 0 ? atoi(env) : 60;
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    if (getenv("IPCSHIM_SOAK_SEED"))
        seed = (unsigned)strtoul(getenv("IPCSHIM_SOAK_SEED"), NULL, 10);
    say("soak: %d rounds, seed %u (IPCSHIM_SOAK_SEED replays it)\n", rounds, seed);
    struct totals t = {0};
    long start = now_ms();
    for (int round = 0; round < rounds; round++)
        round_once(round, &seed, &t);
    char summary[1024];
    snprintf(
        summary, sizeof summary,
        "soak summary: rounds %d (%d early, %d with delays), kills %d (consumers %d, producers "
        "%d), "
        "lock repairs %u, blocks lost %d, blocks leaked after the final sweep %d, "
        "reclaimed only under pressure %d (early rounds), poison reads after the exporter died %d, "
        "survivor opens %ld, refused opens %ld, %.1f s\n",
        t.rounds, t.early_rounds, t.delayed_rounds, t.kills, t.consumer_kills, t.producer_kills,
        t.repairs, t.lost, t.leaked, t.pressure_reclaims, t.poison_after_death, t.opens, t.refused,
        (now_ms() - start) / 1000.0);
    say("%s", summary);
    if (report) fclose(report);
    cr_expect_eq(t.lost, 0, "blocks lost: %d", t.lost);
    cr_expect_eq(t.leaked, 0, "blocks leaked: %d", t.leaked);
    cr_expect_geq(t.kills, rounds * VICTIMS, "kills: %d", t.kills);
}

/* The control: without the shim, consumers of blocks their producer frees
 * read poison, and the soak's consumers say so (three of them, so that one
 * surely holds a block when the frees come). */
Test(soak, control_without_shim_consumers_read_poison, .timeout = 60)
{
    static struct child prod, cons[3];
    char line[512], hex[BLOCKS][129], flag[256];
    snprintf(flag, sizeof flag, "/tmp/%s-never", crash_domain());
    cr_assert_eq(child_spawn(&prod, "soak", false, NULL, ARGS("producer", "99", "4", BLOCK_SIZE)),
                 0);
    for (int got = 0; got < BLOCKS + 1;) {
        cr_assert_eq(child_line(&prod, line, sizeof line, 10000), 1, "%s", prod.buf);
        int k;
        char h[129];
        if (sscanf(line, "handle %d %128s", &k, h) == 2 && k >= 0 && k < BLOCKS)
            strcpy(hex[k], h), got++;
        else if (!strcmp(line, "ready"))
            got++;
    }
    for (int c = 0; c < 3; c++) {
        const char *args[] = {"consumer", "99",   BLOCK_SIZE, c ? "2" : "1", flag,
                              hex[0],     hex[1], hex[2],     hex[3],        NULL};
        cr_assert_eq(child_spawn(&cons[c], "soak", false, NULL, args), 0);
        int r;
        while ((r = child_line(&cons[c], line, sizeof line, 10000)) == 1 && strcmp(line, "ready")) {
        }
        cr_assert_eq(r, 1, "%s", cons[c].buf);
    }
    for (int b = 0; b < BLOCKS; b++) {
        snprintf(line, sizeof line, "free %d", b);
        child_send(&prod, line);
    }
    /* Each reads poison as soon as it next reads a block it holds. */
    int poisoned = 0;
    for (int c = 0; c < 3; c++) {
        bool poison = false;
        while (!poison && child_line(&cons[c], line, sizeof line, 1000) == 1)
            poison = strstr(line, "POISON") != NULL;
        poisoned += poison;
        child_wait(&cons[c], 10000);
    }
    child_wait(&prod, 10000);
    cr_expect_geq(poisoned, 1, "some consumer must report poison");
}
