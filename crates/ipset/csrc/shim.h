/* Bridges libipset's variadic output callback to one non-variadic call.
 *
 * libipset prints list/save output through a printf-like callback. Rust cannot
 * define variadic functions, so this shim formats the text and hands Rust a
 * (pointer, length) pair that Rust copies into memory it owns. Nothing
 * allocated here outlives the call.
 */
#ifndef IPSET_RS_SHIM_H
#define IPSET_RS_SHIM_H

#include <stddef.h>
#include <libipset/session.h>

/* Receives len bytes of formatted output (not NUL-terminated); must copy them. */
typedef void (*ipset_rs_write_fn)(void *ctx, const char *buf, size_t len);

/* Where output goes: must stay valid (same address) for the session's life. */
struct ipset_rs_sink {
	ipset_rs_write_fn write;
	void *ctx;
};

/* ipset_session_init with the shim's output callback writing to sink. */
struct ipset_session *ipset_rs_session_init(const struct ipset_rs_sink *sink);

#endif
