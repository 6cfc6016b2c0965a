/*
 * nmeter: the part of busybox's nmeter applet the node e2e suite uses, for
 * the busybox test image (Debian's busybox is built without nmeter).
 *
 *   nmeter [-d MSEC] FORMAT
 *
 * prints FORMAT once every MSEC milliseconds (default 1000; 0: without
 * pause) until writing fails (the reader went away). In FORMAT, %Nt is the
 * wall-clock time of day in UTC as HH:MM:SS with N decimals (0..6; %t is
 * N=0), %% is a percent sign; everything else is copied. The suite runs
 * `nmeter -d0 '%3t' | head -n1` for a timestamp with milliseconds.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int render(const char *fmt) {
	struct timeval tv;
	struct tm tm;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	for (const char *p = fmt; *p; p++) {
		if (*p != '%') {
			if (putchar(*p) == EOF) return -1;
			continue;
		}
		p++;
		int prec = 0;
		if (*p >= '0' && *p <= '9') prec = *p++ - '0';
		if (*p == '%') {
			if (putchar('%') == EOF) return -1;
		} else if (*p == 't') {
			if (prec > 6) prec = 6;
			if (printf("%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec) < 0) return -1;
			if (prec > 0) {
				long frac = tv.tv_usec;
				for (int i = 6; i > prec; i--) frac /= 10;
				if (printf(".%0*ld", prec, frac) < 0) return -1;
			}
		} else {
			fprintf(stderr, "nmeter: unsupported format %%%c\n", *p ? *p : ' ');
			return -2;
		}
		if (!*p) break;
	}
	if (putchar('\n') == EOF || fflush(stdout) == EOF) return -1;
	return 0;
}

int main(int argc, char **argv) {
	long delay = 1000;
	int opt;
	while ((opt = getopt(argc, argv, "d:")) != -1) {
		if (opt != 'd') {
			fprintf(stderr, "usage: nmeter [-d MSEC] FORMAT\n");
			return 1;
		}
		char *end;
		delay = strtol(optarg, &end, 10);
		if (*end || delay < 0) {
			fprintf(stderr, "nmeter: bad delay %s\n", optarg);
			return 1;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "usage: nmeter [-d MSEC] FORMAT\n");
		return 1;
	}
	for (;;) {
		int rc = render(argv[optind]);
		if (rc == -2) return 1;
		if (rc < 0) return 0; /* the reader is gone */
		if (delay > 0) {
			struct timespec ts = {delay / 1000, (delay % 1000) * 1000000L};
			while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
			}
		}
	}
}
