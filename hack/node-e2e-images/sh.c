/*
 * sh: /bin/sh of the node e2e busybox stand-in. It runs busybox's ash, as
 * upstream's image does, except when the environment holds a variable whose
 * name is not a shell identifier (data-1, from a Secret or ConfigMap): then
 * it runs bash.
 *
 * Why two shells: the suite needs both behaviours of upstream's busybox
 * 1.37 ash. Its read-only root filesystem spec wants ash's own error text
 * ("/bin/sh: can't create /file: Read-only file system"), and its
 * env-from-Secret/ConfigMap specs run `sh -c env` and want such variables
 * passed on to env. Debian's busybox 1.35 ash drops them before running a
 * command (1.37 keeps them); bash keeps them.
 *
 * argv is handed on unchanged: busybox picks its applet by the base name of
 * argv[0] ("sh"), and both shells name themselves after it in messages.
 */
#include <stdio.h>
#include <unistd.h>

extern char **environ;

static int is_ident_char(char c, int first) {
	if (c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) return 1;
	return !first && c >= '0' && c <= '9';
}

/* has_odd_name reports whether some NAME=VALUE of env has a NAME that is
 * not a shell identifier. */
static int has_odd_name(char **env) {
	for (; *env; env++) {
		const char *p = *env;
		if (*p == '=' || *p == '\0') return 1;
		for (int first = 1; *p && *p != '='; p++, first = 0)
			if (!is_ident_char(*p, first)) return 1;
	}
	return 0;
}

int main(int argc, char **argv) {
	const char *shell = has_odd_name(environ) ? "/usr/bin/bash" : "/bin/busybox";
	(void)argc;
	execv(shell, argv);
	perror(shell);
	return 127;
}
