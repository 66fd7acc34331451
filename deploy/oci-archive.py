#!/usr/bin/env python3
"""Writes container images without an image builder: layers from directories or tarballs,
and a docker-archive tarball (the format of `docker save`: manifest.json with RepoTags, the
config JSON, one tarball per layer) that `ctr -n k8s.io images import FILE` (containerd
2.2) imports with the image's name intact.

Two commands:

  oci-archive.py image --tag TAG [--entrypoint JSON] [--cmd JSON] [--env K=V]...
                       [--workdir DIR] [--gzip] -o OUT.tar LAYER...
      LAYER is a directory (its contents are the layer's "/", normalized as `layer` does)
      or a tarball made by `layer` (taken as it is, gzip-compressed or not), lowest first.
      The config gets PATH (Debian's usual one) unless --env sets it, the host's
      architecture unless --arch says otherwise, and a fixed creation date. --gzip
      compresses the layers that are not already compressed (the tarball is then smaller,
      and so is containerd's content store; the unpacked image is the same).

  oci-archive.py layer [--base BASE.tar] [--owner keep|root] -o OUT.tar SOURCE...
      Writes one normalized layer tarball from directories and tarballs (merged, later
      ones win). With --base (a tarball made by `layer`), only what differs from it:
      new and changed entries, their parent directories, and whiteouts (.wh.NAME) for
      what the base has and the sources do not, so that BASE + OUT is the sources.

Normalized means deterministic, so that the same inputs give the same bytes and digests:
entries sorted by path, parents first; every mtime SOURCE_DATE_EPOCH (0 if unset); owners
numeric (0:0 for directories unless --owner keep, as a tarball's own otherwise), no user or
group names; modes, symbolic links and hard links kept (a hard-link group is stored once,
under its first path, the others link to it); the security.capability attribute kept (it
is what makes ping work unprivileged); device nodes, FIFOs and sockets dropped (the
runtime makes /dev).

Python 3 standard library only.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import sys
import tarfile
import tempfile

CHUNK = 1 << 20
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
XATTR_KEEP = ("security.capability",)
PAX_XATTR = "SCHILY.xattr."
TYPES = {tarfile.REGTYPE: "f", tarfile.AREGTYPE: "f", tarfile.CONTTYPE: "f",
         tarfile.DIRTYPE: "d", tarfile.SYMTYPE: "l", tarfile.LNKTYPE: "h"}


def mtime():
    return int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def clean(name):
    """A member's path as a layer stores it: relative, no "./", no trailing slash."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SystemExit(f"oci-archive: refusing a path with '..': {name}")
    return "/".join(parts)


class Entry:
    """One file system object: its kind, metadata and where its bytes are."""

    __slots__ = ("path", "kind", "mode", "uid", "gid", "target", "xattrs", "size",
                 "src", "group", "digest")

    def __init__(self, path, kind, mode, uid, gid, target="", xattrs=None, size=0, src=None):
        self.path, self.kind, self.mode = path, kind, mode
        self.uid, self.gid, self.target = uid, gid, target
        self.xattrs = xattrs or {}
        self.size, self.src = size, src  # src: ("file", path) or ("tar", TarFile, TarInfo)
        self.group = None  # the hard-link group's key, for regular files with links
        self.digest = None

    def open(self):
        if self.src[0] == "file":
            return open(self.src[1], "rb")
        return self.src[1].extractfile(self.src[2])

    def content_digest(self):
        if self.digest is None:
            h = hashlib.sha256()
            if self.kind == "f":
                with self.open() as f:
                    for chunk in iter(lambda: f.read(CHUNK), b""):
                        h.update(chunk)
            self.digest = h.hexdigest()
        return self.digest


def read_dir(root, owner):
    """Entries of a directory tree; links between its files become hard-link groups."""
    entries, dropped = {}, 0
    root = os.path.abspath(root)
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            full = os.path.join(top, name)
            path = clean(os.path.relpath(full, root))
            st = os.lstat(full)
            uid, gid = (st.st_uid, st.st_gid) if owner == "keep" else (0, 0)
            mode = stat.S_IMODE(st.st_mode)
            xattrs = {}
            if hasattr(os, "getxattr") and not stat.S_ISLNK(st.st_mode):
                for key in XATTR_KEEP:
                    try:
                        xattrs[key] = os.getxattr(full, key)
                    except OSError:
                        pass
            if stat.S_ISDIR(st.st_mode):
                e = Entry(path, "d", mode, uid, gid, xattrs=xattrs)
            elif stat.S_ISLNK(st.st_mode):
                e = Entry(path, "l", mode, uid, gid, target=os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                e = Entry(path, "f", mode, uid, gid, xattrs=xattrs, size=st.st_size,
                          src=("file", full))
                if st.st_nlink > 1:
                    e.group = ("dir", root, st.st_dev, st.st_ino)
            else:
                dropped += 1
                continue
            entries[path] = e
        # os.walk does not descend into symlinks to directories: they are entries above.
    return entries, dropped


def open_tar(path, stack):
    """A tarball, read with random access (a compressed one is decompressed to a temp file)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        tmp = tempfile.TemporaryFile()
        with gzip.open(path, "rb") as g:
            shutil.copyfileobj(g, tmp, CHUNK)
        tmp.seek(0)
        stack.append(tmp)
        tf = tarfile.open(fileobj=tmp, mode="r:")
    else:
        tf = tarfile.open(path, mode="r:")
    stack.append(tf)
    return tf


def read_tar(path, owner, stack):
    """Entries of a tarball; LNKTYPE members join their target's hard-link group."""
    tf = open_tar(path, stack)
    entries, dropped, whiteouts = {}, 0, []
    for ti in tf:
        p = clean(ti.name)
        if not p:
            continue
        if os.path.basename(p).startswith(".wh."):
            whiteouts.append(p)
            continue
        kind = TYPES.get(ti.type)
        if kind is None:
            dropped += 1
            continue
        uid, gid = (ti.uid, ti.gid) if owner != "root" else (0, 0)
        xattrs = {k[len(PAX_XATTR):]: v.encode("utf-8", "surrogateescape")
                  for k, v in ti.pax_headers.items()
                  if k.startswith(PAX_XATTR) and k[len(PAX_XATTR):] in XATTR_KEEP}
        if kind == "h":
            target = clean(ti.linkname)
            t = entries.get(target)
            if t is None or t.kind != "f":
                raise SystemExit(f"oci-archive: {path}: hard link {p} to a missing {target}")
            if t.group is None:
                t.group = ("tar", path, target)
            e = Entry(p, "f", t.mode, t.uid, t.gid, xattrs=t.xattrs, size=t.size, src=t.src)
            e.group = t.group
        elif kind == "f":
            e = Entry(p, "f", stat.S_IMODE(ti.mode), uid, gid, xattrs=xattrs, size=ti.size,
                      src=("tar", tf, ti))
        else:
            e = Entry(p, kind, stat.S_IMODE(ti.mode), uid, gid, target=ti.linkname, xattrs=xattrs)
        entries[p] = e
    return entries, dropped, whiteouts


def read_sources(sources, owner, stack):
    merged, dropped = {}, 0
    for src in sources:
        if os.path.isdir(src):
            entries, n = read_dir(src, owner)
        else:
            entries, n, whiteouts = read_tar(src, owner, stack)
            if whiteouts:
                raise SystemExit(f"oci-archive: {src} has whiteouts: give it to `image`, not `layer`")
        dropped += n
        for path, e in entries.items():
            # A later source replaces a path, and everything under it unless both are dirs.
            old = merged.get(path)
            if old is not None and not (old.kind == "d" and e.kind == "d"):
                prefix = path + "/"
                for p in [p for p in merged if p.startswith(prefix)]:
                    del merged[p]
            merged[path] = e
    if dropped:
        print(f"oci-archive: dropped {dropped} device nodes, FIFOs or sockets", file=sys.stderr)
    return merged


def sort_key(path):
    # By components, so that a directory's entries follow it directly ("a/b" before "a-b").
    return path.split("/")


def signature(e, groups):
    members = tuple(groups[e.group]) if e.group is not None else ()
    return (e.kind, e.mode, e.uid, e.gid, e.target, tuple(sorted(e.xattrs.items())),
            e.content_digest() if e.kind == "f" else "", members)


def link_groups(entries):
    groups = {}
    for p in sorted(entries, key=sort_key):
        e = entries[p]
        if e.group is not None:
            groups.setdefault(e.group, []).append(p)
    return groups


def diff(base, new):
    """What to write so that base + layer == new: paths, and whiteout paths."""
    bgroups, ngroups = link_groups(base), link_groups(new)
    changed = set()
    for p, e in new.items():
        b = base.get(p)
        if b is None or signature(b, bgroups) != signature(e, ngroups):
            changed.add(p)
    for p in list(changed):  # a hard-link group is written whole: a layer cannot link below
        g = new[p].group
        if g is not None:
            changed.update(ngroups[g])
    keep = set(changed)
    for p in changed:  # parents, so that the layer's tree is complete
        parts = p.split("/")
        for i in range(1, len(parts)):
            keep.add("/".join(parts[:i]))
    whiteouts = []
    for p in base:
        if p in new:
            continue
        parts = p.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
        # A removed ancestor's whiteout, or an ancestor that is no directory now, covers it.
        if any(a not in new or new[a].kind != "d" for a in ancestors):
            continue
        whiteouts.append(p)
        parent = p.rpartition("/")[0]
        if parent:
            keep.add(parent)
            parts = parent.split("/")
            for i in range(1, len(parts)):
                keep.add("/".join(parts[:i]))
    return keep, whiteouts


def write_layer(out, entries, only=None, whiteouts=()):
    """The layer tarball, sorted, with one data copy per hard-link group."""
    t = mtime()
    items = [(p, entries[p]) for p in entries if only is None or p in only]
    for w in whiteouts:
        head, _, base = w.rpartition("/")
        wp = (head + "/" if head else "") + ".wh." + base
        items.append((wp, Entry(wp, "f", 0, 0, 0)))
    items.sort(key=lambda pe: sort_key(pe[0]))
    first = {}  # hard-link group -> the path stored with data
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path, e in items:
            ti = tarfile.TarInfo(path)
            ti.mode, ti.uid, ti.gid, ti.uname, ti.gname, ti.mtime = e.mode, e.uid, e.gid, "", "", t
            if e.xattrs:
                ti.pax_headers = {PAX_XATTR + k: v.decode("utf-8", "surrogateescape")
                                  for k, v in sorted(e.xattrs.items())}
            data = None
            if e.kind == "d":
                ti.type = tarfile.DIRTYPE
            elif e.kind == "l":
                ti.type, ti.linkname = tarfile.SYMTYPE, e.target
            elif e.group is not None and e.group in first:
                ti.type, ti.linkname = tarfile.LNKTYPE, first[e.group]
            else:
                ti.type, ti.size = tarfile.REGTYPE, e.size
                if e.group is not None:
                    first[e.group] = path
                if e.src is not None:
                    data = e.open()
            tar.addfile(ti, data)
            if data is not None:
                data.close()


def cmd_layer(args):
    stack = []
    try:
        new = read_sources(args.sources, args.owner, stack)
        only, whiteouts = None, ()
        if args.base:
            base, _, _ = read_tar(args.base, "keep", stack)
            only, whiteouts = diff(base, new)
        tmp = args.output + ".tmp"
        with open(tmp, "wb") as out:
            write_layer(out, new, only, whiteouts)
        os.replace(tmp, args.output)
    finally:
        for s in reversed(stack):
            s.close()


class HashingWriter(io.RawIOBase):
    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def writable(self):
        return True

    def write(self, b):
        self.h.update(b)
        self.n += len(b)
        return self.f.write(b)


def prepare_layer(src, compress, workdir):
    """(blob file, blob sha256, diff_id): the bytes to store, and the uncompressed digest."""
    if os.path.isdir(src):
        raw = os.path.join(workdir, f"layer{len(os.listdir(workdir))}.tar")
        stack = []
        try:
            entries = read_sources([src], "root", stack)
            with open(raw, "wb") as out:
                write_layer(out, entries)
        finally:
            for s in stack:
                s.close()
        src = raw
    with open(src, "rb") as f:
        compressed = f.read(2) == b"\x1f\x8b"
    diff_id = hashlib.sha256()
    opener = gzip.open if compressed else open
    with opener(src, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            diff_id.update(chunk)
    if compress and not compressed:
        blob = os.path.join(workdir, f"layer{len(os.listdir(workdir))}.tar.gz")
        with open(src, "rb") as f, open(blob, "wb") as raw_out:
            w = HashingWriter(raw_out)
            # mtime=0 and no file name: the same bytes every time.
            with gzip.GzipFile(filename="", mode="wb", fileobj=w, compresslevel=6, mtime=0) as g:
                shutil.copyfileobj(f, g, CHUNK)
        return blob, w.h.hexdigest(), "sha256:" + diff_id.hexdigest()
    if compressed:
        h = hashlib.sha256()
        with open(src, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
        return src, h.hexdigest(), "sha256:" + diff_id.hexdigest()
    return src, diff_id.hexdigest(), "sha256:" + diff_id.hexdigest()


def arch():
    m = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
            "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}.get(m, m)


def add_bytes(tar, name, data, t):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = len(data), t, 0o644, "", ""
    tar.addfile(ti, io.BytesIO(data))


def cmd_image(args):
    t = mtime()
    created = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    env = list(args.env)
    if not any(e.startswith("PATH=") for e in env):
        env.insert(0, "PATH=" + DEFAULT_PATH)
    config = {"Env": env}
    if args.entrypoint is not None:
        config["Entrypoint"] = json.loads(args.entrypoint)
    if args.cmd is not None:
        config["Cmd"] = json.loads(args.cmd)
    for key in ("Entrypoint", "Cmd"):
        v = config.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(s, str) for s in v)):
            raise SystemExit(f"oci-archive: --{key.lower()} must be a JSON list of strings")
    if args.workdir:
        config["WorkingDir"] = args.workdir
    if args.label:
        labels = {}
        for kv in args.label:
            key, sep, value = kv.partition("=")
            if not sep or not key:
                raise SystemExit(f"oci-archive: --label {kv!r} is not KEY=VALUE")
            labels[key] = value
        config["Labels"] = labels
    out_dir = os.path.dirname(os.path.abspath(args.output))
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".oci-archive.") as work:
        layers = [prepare_layer(src, args.gzip, work) for src in args.layers]
        image = {
            "architecture": args.arch or arch(),
            "os": "linux",
            "created": created,
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [d for _, _, d in layers]},
            "history": [{"created": created, "created_by": f"oci-archive.py: {os.path.basename(s.rstrip('/'))}"}
                        for s in args.layers],
        }
        config_bytes = json.dumps(image, sort_keys=True, separators=(",", ":")).encode()
        config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
        names = [f"{h}/layer.tar" for _, h, _ in layers]
        manifest = [{"Config": config_name, "RepoTags": args.tag, "Layers": names}]
        tmp = args.output + ".tmp"
        with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
            seen = set()
            for (blob, h, _), name in zip(layers, names):
                if name in seen:
                    continue
                seen.add(name)
                ti = tarfile.TarInfo(h)
                ti.type, ti.mode, ti.mtime, ti.uname, ti.gname = tarfile.DIRTYPE, 0o755, t, "", ""
                tar.addfile(ti)
                ti = tarfile.TarInfo(name)
                ti.size, ti.mode, ti.mtime, ti.uname, ti.gname = os.path.getsize(blob), 0o644, t, "", ""
                with open(blob, "rb") as f:
                    tar.addfile(ti, f)
            add_bytes(tar, config_name, config_bytes, t)
            add_bytes(tar, "manifest.json",
                      json.dumps(manifest, separators=(",", ":")).encode(), t)
        os.replace(tmp, args.output)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    im = sub.add_parser("image", help="write a docker-archive from layers")
    im.add_argument("--tag", action="append", required=True,
                    help="the image's name, e.g. registry.k8s.io/pause:3.10.2 (repeatable)")
    im.add_argument("--entrypoint", help='a JSON list, e.g. \'["/pause"]\'')
    im.add_argument("--cmd", help='a JSON list, e.g. \'["sh"]\'')
    im.add_argument("--env", action="append", default=[], metavar="K=V")
    im.add_argument("--workdir")
    im.add_argument("--label", action="append", default=[], metavar="K=V",
                    help="an image label (org.opencontainers.image.revision=...)")
    im.add_argument("--arch", help="GOARCH-style (default: this machine's)")
    im.add_argument("--gzip", action="store_true", help="compress the layers")
    im.add_argument("-o", "--output", required=True)
    im.add_argument("layers", nargs="+", metavar="LAYER")
    la = sub.add_parser("layer", help="write one normalized layer tarball")
    la.add_argument("--base", help="a layer tarball: write only the difference from it")
    la.add_argument("--owner", choices=("keep", "root"), default=None,
                    help="keep the owners, or make them 0:0 (default: root for directories, "
                         "keep for tarballs)")
    la.add_argument("-o", "--output", required=True)
    la.add_argument("sources", nargs="+", metavar="SOURCE")
    args = ap.parse_args(argv)
    if args.command == "image":
        cmd_image(args)
    else:
        cmd_layer(args)


if __name__ == "__main__":
    main()
