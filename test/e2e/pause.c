/* The pod sandbox ("pause") process of the end-to-end tier (test/e2e/pods.sh): it holds the pod's
 * namespaces and does nothing else. kubelet and containerd need one image for it; no registry is
 * reachable here, so this is built with `gcc -static` and packed from scratch by scripts/image.sh.
 *
 * Blocks in sigsuspend(); exits 0 on SIGTERM or SIGINT; reaps every child on SIGCHLD (as PID 1 of a
 * shared PID namespace it inherits orphans). Takes no arguments; `-v` prints its name and exits. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal = 0;
static volatile sig_atomic_t child_exited = 0;

static void on_stop(int sig) { stop_signal = sig; }
static void on_child(int sig) { (void)sig; child_exited = 1; }

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("toposched-e2e pause");
    return 0;
  }
  if (getpid() != 1) fprintf(stderr, "pause: warning: not PID 1\n");

  sigset_t blocked, waiting;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGCHLD);
  /* Blocked outside sigsuspend, so no signal is lost between the checks and the wait. */
  if (sigprocmask(SIG_BLOCK, &blocked, &waiting) != 0) return 1;
  sigdelset(&waiting, SIGTERM);
  sigdelset(&waiting, SIGINT);
  sigdelset(&waiting, SIGCHLD);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_stop;
  if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) return 1;
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &sa, NULL) != 0) return 1;

  for (;;) {
    sigsuspend(&waiting); /* returns -1/EINTR after a handler ran */
    if (child_exited) {
      child_exited = 0;
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
    }
    if (stop_signal) return 0;
  }
}
