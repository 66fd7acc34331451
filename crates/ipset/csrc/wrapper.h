/* Everything bindgen reads: libipset's public headers and the shim. */
#include <libipset/ipset.h>
#include <libipset/data.h>
#include <libipset/errcode.h>
#include <libipset/session.h>
#include <libipset/types.h>
#include <libipset/linux_ip_set.h>
#include <libipset/nfproto.h>
#include "shim.h"
