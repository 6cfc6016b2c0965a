/*
 * nnp: the program of netshim's stand-in for critest's nonewprivs image
 * (hack/critest-images.sh). Installed setuid root, it prints the effective
 * uid it runs with: 0 when the setuid bit took effect, the caller's uid when
 * no_new_privs kept it from doing so. critest's NoNewPrivs specs compare the
 * container log with "Effective uid: N\n".
 *
 * Built static (gcc -static) so that the image needs no libc.
 */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	if (printf("Effective uid: %d\n", (int)geteuid()) < 0 || fflush(stdout) != 0)
		return 1;
	return 0;
}
