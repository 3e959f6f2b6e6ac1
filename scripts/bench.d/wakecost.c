// What sleeping and waking cost in CPU on this machine, the floor under
// every forwarded miss of the node-cache scenario (BENCHMARKS.md, "Notable past
// results"; the whole run in "node-cache misses: the same binary twice, and what
// a wake-up costs here" of BENCHMARKS.md at commit b22f0be).
//
//   cc -O2 -pthread -o /tmp/wakecost scripts/bench.d/wakecost.c
//   /tmp/wakecost sleep|wake [ROUNDS]
//
// Two threads, the measured one on CPU 1 and its peer on CPU 0, as the bench
// pins the server under test and its peers:
//   sleep  the measured thread blocks in epoll_wait on an eventfd and is woken
//          by a peer that spins (its own sleep and wake-up, no wake sent);
//   wake   the measured thread writes the eventfd that wakes a peer blocked in
//          epoll_wait (the write alone, timed with the thread's CPU clock).
// Prints the measured thread's CPU time per round. `sleep` reads the thread's
// CPU clock once before and once after all rounds, as the bench reads a
// server's CPU over a phase: read around every wake-up instead it gave
// higher and far more scattered figures here.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

enum mode { SLEEP, WAKE };

static enum mode mode;
static int rounds = 20000;
static int to_measured, to_peer; // eventfds
static atomic_int answered;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static double cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// Spins for US microseconds of wall time: the gap between two queries.
static void gap(int us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000 + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static int poller(int fd) {
    int ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0) {
        perror("epoll");
        exit(1);
    }
    return ep;
}

static void block(int ep, int fd) {
    struct epoll_event o;
    uint64_t v;
    while (epoll_wait(ep, &o, 1, -1) < 1) {
    }
    if (read(fd, &v, sizeof v) != sizeof v) {
        perror("read");
        exit(1);
    }
}

static void kick(int fd) {
    uint64_t v = 1;
    if (write(fd, &v, sizeof v) != sizeof v) {
        perror("write");
        exit(1);
    }
}

static void *peer(void *unused) {
    (void)unused;
    pin(0);
    int ep = poller(to_peer);
    for (int i = 0; i < rounds; i++) {
        if (mode == SLEEP) {
            gap(100);
            atomic_store(&answered, 0);
            kick(to_measured);
            while (!atomic_load(&answered)) {
            }
        } else {
            block(ep, to_peer);
            atomic_store(&answered, 1);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "sleep") && strcmp(argv[1], "wake"))) {
        fprintf(stderr, "usage: %s sleep|wake [ROUNDS]\n", argv[0]);
        return 2;
    }
    mode = !strcmp(argv[1], "sleep") ? SLEEP : WAKE;
    if (argc > 2 && (rounds = atoi(argv[2])) < 1) {
        fprintf(stderr, "ROUNDS must be a positive number\n");
        return 2;
    }
    to_measured = eventfd(0, EFD_NONBLOCK);
    to_peer = eventfd(0, EFD_NONBLOCK);
    pthread_t t;
    pthread_create(&t, NULL, peer, NULL);
    pin(1);
    int ep = poller(to_measured);
    double spent = 0;
    if (mode == SLEEP) {
        double t0 = cpu_us();
        for (int i = 0; i < rounds; i++) {
            block(ep, to_measured);
            atomic_store(&answered, 1);
        }
        spent = cpu_us() - t0;
    } else {
        for (int i = 0; i < rounds; i++) {
            gap(100); // let the peer fall asleep
            atomic_store(&answered, 0);
            double a = cpu_us();
            kick(to_peer);
            spent += cpu_us() - a; // the write alone, not this thread's gaps
            while (!atomic_load(&answered)) {
            }
        }
    }
    pthread_join(t, NULL);
    printf("%s: %.2f us of CPU per round (%d rounds)\n", argv[1], spent / rounds, rounds);
    return 0;
}
