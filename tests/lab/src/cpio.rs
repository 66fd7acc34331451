//! A writer for the `newc` cpio format, the one the kernel unpacks as an initramfs.
//!
//! The payload archive is appended to the image's base archive; the kernel unpacks
//! concatenated archives in order, so later entries add to (or replace files of) the base.

use std::io::{self, Write};

/// File type bits of `st_mode`.
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// Writes entries of a `newc` archive; [`Writer::finish`] writes the trailer.
pub struct Writer<W: Write> {
    out: W,
    written: u64,
    next_ino: u32,
}

impl<W: Write> Writer<W> {
    /// Starts an archive on `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            written: 0,
            next_ino: 1,
        }
    }

    /// Adds a directory. `path` is relative to the root, without a leading `/`.
    pub fn dir(&mut self, path: &str, perm: u32) -> io::Result<()> {
        self.entry(path, S_IFDIR | perm, 2, &[])
    }

    /// Adds a regular file with the given contents.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(path, S_IFREG | perm, 1, data)
    }

    /// Adds a symbolic link pointing at `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, S_IFLNK | 0o777, 1, target.as_bytes())
    }

    /// Writes the trailer and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, 1, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) -> io::Result<()> {
        let name = name.trim_start_matches('/');
        let ino = self.next_ino;
        self.next_ino += 1;
        let size = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file over 4 GiB"))?;
        let header = format!(
            "070701{ino:08x}{mode:08x}{uid:08x}{gid:08x}{nlink:08x}{mtime:08x}{size:08x}\
             {maj:08x}{min:08x}{rmaj:08x}{rmin:08x}{namesize:08x}{check:08x}",
            uid = 0,
            gid = 0,
            mtime = 0,
            maj = 0,
            min = 0,
            rmaj = 0,
            rmin = 0,
            namesize = name.len() + 1,
            check = 0,
        );
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let rem = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0u8; 3][..rem])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// The real `cpio` tool must list what we wrote, with the right types and contents.
    #[test]
    fn real_cpio_reads_our_archive() {
        let mut w = Writer::new(Vec::new());
        w.dir("lab", 0o755).unwrap();
        w.file("lab/run", 0o755, b"#!/bin/sh\necho hi\n").unwrap();
        w.symlink("lab/sh", "/bin/dash").unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % 4, 0);

        let dir = std::env::temp_dir().join(format!("lab-cpio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new("cpio")
            .args(["-idm", "--quiet"])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .spawn()
            .expect("the cpio tool (package cpio) is installed");
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        assert!(child.wait().unwrap().success());
        let run = std::fs::read_to_string(dir.join("lab/run")).unwrap();
        assert_eq!(run, "#!/bin/sh\necho hi\n");
        let target = std::fs::read_link(dir.join("lab/sh")).unwrap();
        assert_eq!(target.to_str(), Some("/bin/dash"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
