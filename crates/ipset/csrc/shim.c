/* See shim.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static int __attribute__((format(printf, 3, 4)))
ipset_rs_outfn(struct ipset_session *session, void *p, const char *fmt, ...)
{
	const struct ipset_rs_sink *sink = p;
	char small[1024];
	va_list ap, again;
	int len;

	(void)session;
	va_start(ap, fmt);
	/* libipset flushes its output buffer as "%s": pass the string through. */
	if (strcmp(fmt, "%s") == 0) {
		const char *s = va_arg(ap, const char *);
		size_t n = strlen(s);

		va_end(ap);
		sink->write(sink->ctx, s, n);
		return (int)n;
	}
	va_copy(again, ap);
	len = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (len < 0) {
		va_end(again);
		return len;
	}
	if ((size_t)len < sizeof(small)) {
		sink->write(sink->ctx, small, (size_t)len);
	} else {
		char *big = malloc((size_t)len + 1);

		if (big == NULL) {
			va_end(again);
			return -1;
		}
		vsnprintf(big, (size_t)len + 1, fmt, again);
		sink->write(sink->ctx, big, (size_t)len);
		free(big);
	}
	va_end(again);
	return len;
}

struct ipset_session *
ipset_rs_session_init(const struct ipset_rs_sink *sink)
{
	return ipset_session_init(ipset_rs_outfn, (void *)sink);
}
