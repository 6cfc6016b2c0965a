/*
 * pause: the infra ("sandbox") container process of a pod.
 *
 * It holds the pod's namespaces open and does nothing else: it sleeps in
 * pause(), reaps any child that gets reparented to it (it is PID 1 of the
 * pod's PID namespace when that namespace is shared), and exits 0 on
 * SIGTERM or SIGINT so that `docker stop` returns at once.
 *
 * Built static (gcc -static -Os) so that the image needs no libc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_exit_signal(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_sigchld(int sig)
{
	int saved = errno;

	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

static int handle(int sig, void (*fn)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv)
{
	static const char version[] = "pause (netshim)\n";

	/* Like the upstream pause binary: -v prints a version; other arguments are ignored. */
	if (argc > 1 && strcmp(argv[1], "-v") == 0)
		return write(STDOUT_FILENO, version, sizeof(version) - 1) < 0;
	if (handle(SIGTERM, on_exit_signal) < 0 || handle(SIGINT, on_exit_signal) < 0 ||
	    handle(SIGCHLD, on_sigchld) < 0)
		return 2;

	for (;;)
		pause();
	return 42; /* not reached */
}
