/*
 * The pod sandbox's process for the lab cluster's pause image (tests/cluster/images.sh builds
 * it with `gcc -static`, as registry.k8s.io/pause cannot be pulled here). It holds the pod's
 * namespaces and does nothing else: it sleeps until a signal comes, exits 0 on SIGINT or
 * SIGTERM (the runtime stopping the sandbox), and, being PID 1 of the pod when the pod shares
 * its process namespace, reaps the orphans that are reparented to it (SIGCHLD).
 *
 *   pause        sleep
 *   pause -v     print the version, exit
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef VERSION
#define VERSION "3.10.2-lab"
#endif

static void say(const char *s)
{
    /* write(2) only: it is safe in a signal handler, stdio is not. */
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void on_stop(int sig)
{
    say(sig == SIGINT ? "pause: SIGINT, exiting\n" : "pause: SIGTERM, exiting\n");
    _exit(0);
}

static void on_child(int sig)
{
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

int main(int argc, char **argv)
{
    struct sigaction stop, child;

    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        say("pause " VERSION "\n");
        return 0;
    }
    if (getpid() != 1)
        say("pause: not PID 1: orphans of the pod are reaped only by PID 1\n");

    memset(&stop, 0, sizeof stop);
    stop.sa_handler = on_stop;
    sigemptyset(&stop.sa_mask);
    if (sigaction(SIGINT, &stop, NULL) != 0 || sigaction(SIGTERM, &stop, NULL) != 0)
        return 1;

    memset(&child, 0, sizeof child);
    child.sa_handler = on_child;
    sigemptyset(&child.sa_mask);
    child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &child, NULL) != 0)
        return 2;

    for (;;)
        pause();
}
