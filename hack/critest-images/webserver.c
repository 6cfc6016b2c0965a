/*
 * webserver: the tiny HTTP server inside netshim's stand-ins for critest's
 * web server images (hack/critest-images.sh). It answers GET and HEAD of
 * "/" (and "/index.html") with 200 and a small page, anything else with 404.
 *
 * What it does depends on the name it is installed under (the basename of
 * /proc/self/exe):
 *
 *   nginx  like the e2e nginx image: it re-executes itself once so that its
 *          command line reads "nginx: master process ..." (critest greps
 *          /proc/1/cmdline for "master process") while the process name stays
 *          "nginx" (critest runs `pidof nginx`), writes its PID to
 *          /var/run/nginx.pid and listens on $NGINX_PORT (default 80).
 *   httpd  like the e2e httpd image: it prints a line naming httpd (critest
 *          looks for "httpd" in the container log) and listens on port 80.
 *
 * It listens on all addresses (IPv6 and IPv4 when the network namespace has
 * IPv6, IPv4 only otherwise), serves each connection in a child process and
 * exits 0 on SIGTERM, SIGINT or SIGQUIT, removing its PID file. As PID 1 of
 * a container it leaves no zombie: SIGCHLD is ignored, so children are reaped
 * by the kernel.
 *
 * Built static (gcc -static) so that it does not depend on the image's libc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define NGINX_TITLE "nginx: master process"
#define NGINX_PIDFILE "/var/run/nginx.pid"

static const char page[] =
	"<!DOCTYPE html>\n"
	"<html><head><title>Welcome</title></head>\n"
	"<body><h1>It works!</h1><p>netshim critest web server</p></body></html>\n";

static const char *pidfile;

static void on_exit_signal(int sig)
{
	(void)sig;
	if (pidfile)
		unlink(pidfile);
	_exit(0);
}

static int handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL);
}

static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

static void respond(int fd, int code, const char *reason, const char *body, int head)
{
	char hdr[256];
	size_t blen = strlen(body);
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 %d %s\r\n"
			 "Server: netshim-webserver\r\n"
			 "Content-Type: text/html\r\n"
			 "Content-Length: %zu\r\n"
			 "Connection: close\r\n"
			 "\r\n",
			 code, reason, blen);

	write_all(fd, hdr, (size_t)n);
	if (!head)
		write_all(fd, body, blen);
}

/* serve answers one request on fd. */
static void serve(int fd)
{
	char req[4096], method[16], path[1024];
	size_t len = 0;
	struct timeval tv = { .tv_sec = 10 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	/* Read the request head: up to the blank line, or until the buffer is full. */
	while (len < sizeof(req) - 1) {
		ssize_t n = read(fd, req + len, sizeof(req) - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		req[len] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[len] = '\0';

	if (sscanf(req, "%15s %1023s", method, path) != 2) {
		respond(fd, 400, "Bad Request", "bad request\n", 0);
		return;
	}
	int head = strcmp(method, "HEAD") == 0;
	if (!head && strcmp(method, "GET") != 0) {
		respond(fd, 405, "Method Not Allowed", "method not allowed\n", 0);
		return;
	}
	path[strcspn(path, "?#")] = '\0';
	if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0)
		respond(fd, 200, "OK", page, head);
	else
		respond(fd, 404, "Not Found", "not found\n", head);
}

/* listen_on returns a socket listening on port on every address, or -1. */
static int listen_on(int port)
{
	int one = 1, zero = 0;
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0) {
		struct sockaddr_in6 a6;

		memset(&a6, 0, sizeof(a6));
		a6.sin6_family = AF_INET6;
		a6.sin6_addr = in6addr_any;
		a6.sin6_port = htons((unsigned short)port);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, (struct sockaddr *)&a6, sizeof(a6)) == 0 && listen(fd, 128) == 0)
			return fd;
		close(fd);
	}

	/* No IPv6 in this network namespace: IPv4 only. */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a4;

	memset(&a4, 0, sizeof(a4));
	a4.sin_family = AF_INET;
	a4.sin_addr.s_addr = htonl(INADDR_ANY);
	a4.sin_port = htons((unsigned short)port);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) == 0 && listen(fd, 128) == 0)
		return fd;
	close(fd);
	return -1;
}

static int parse_port(const char *s, int def)
{
	char *end;
	long v;

	if (!s || !*s)
		return def;
	v = strtol(s, &end, 10);
	if (*end != '\0' || v < 1 || v > 65535) {
		fprintf(stderr, "webserver: invalid port %s\n", s);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	char exe[4096];
	const char *name;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int nginx, port, fd;

	if (n <= 0) {
		perror("webserver: readlink /proc/self/exe");
		return 2;
	}
	exe[n] = '\0';
	name = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
	nginx = strcmp(name, "nginx") == 0;

	if (nginx && (argc < 1 || strncmp(argv[0], NGINX_TITLE, strlen(NGINX_TITLE)) != 0)) {
		/* Re-execute under the title nginx gives its master process. The
		 * path keeps the name, so the process name (comm) stays "nginx". */
		char **nargv = calloc((size_t)argc + 1, sizeof(char *));
		char title[4200];

		if (!nargv)
			return 2;
		snprintf(title, sizeof(title), "%s %s", NGINX_TITLE, exe);
		nargv[0] = title;
		for (int i = 1; i < argc; i++)
			nargv[i] = argv[i];
		execv(exe, nargv);
		perror("webserver: re-exec");
		return 2;
	}

	if (handle(SIGTERM, on_exit_signal, 0) < 0 || handle(SIGINT, on_exit_signal, 0) < 0 ||
	    handle(SIGQUIT, on_exit_signal, 0) < 0 || handle(SIGCHLD, SIG_IGN, SA_NOCLDWAIT) < 0 ||
	    handle(SIGPIPE, SIG_IGN, 0) < 0) {
		perror("webserver: sigaction");
		return 2;
	}

	port = nginx ? parse_port(getenv("NGINX_PORT"), 80) : 80;
	fd = listen_on(port);
	if (fd < 0) {
		fprintf(stderr, "%s: cannot listen on port %d: %s\n", name, port, strerror(errno));
		return 1;
	}

	if (nginx) {
		FILE *f = fopen(NGINX_PIDFILE, "w");

		if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) {
			fprintf(stderr, "nginx: cannot write %s: %s\n", NGINX_PIDFILE, strerror(errno));
			return 1;
		}
		pidfile = NGINX_PIDFILE;
		printf("nginx: master process %d serving / on port %d\n", (int)getpid(), port);
	} else {
		printf("%s: httpd (netshim stand-in) serving / on port %d\n", name, port);
	}
	fflush(stdout);

	for (;;) {
		int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
				continue;
			perror("webserver: accept");
			return 1;
		}
		pid_t pid = fork();

		if (pid == 0) {
			close(fd);
			serve(c);
			shutdown(c, SHUT_WR);
			close(c);
			_exit(0);
		}
		if (pid < 0)
			serve(c); /* no process to spare: answer inline */
		close(c);
	}
}
