//! The payload: what one run adds to the base image. Host programs keep their absolute host
//! paths inside the guest (so `env!("CARGO_BIN_EXE_...")` and paths next to a test binary work
//! unchanged), with every shared library the base image lacks.

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::cpio;
use crate::image::Image;
use crate::{Error, Result};

/// Top-level names that are symlinks in the base image (merged /usr): an archive entry with
/// one of these names would replace the link and break every program in the guest.
const BASE_SYMLINKS: &[&str] = &["bin", "sbin", "lib", "lib64"];

enum Entry {
    /// A file copied from the host when the archive is written.
    Host { from: PathBuf, strip: bool },
    /// A file with given contents.
    Data(Vec<u8>),
}

/// Files to add to the guest, keyed by their absolute guest path.
pub struct Payload<'a> {
    image: &'a Image,
    entries: BTreeMap<PathBuf, (u32, Entry)>,
}

impl<'a> Payload<'a> {
    /// An empty payload for `image`.
    pub fn new(image: &'a Image) -> Self {
        Self {
            image,
            entries: BTreeMap::new(),
        }
    }

    /// Adds a host executable at its canonical host path, with the shared libraries that the
    /// base image does not hold. Debug sections are stripped on the way (the symbol table
    /// stays, so backtraces still name functions). Returns the guest path.
    pub fn add_executable(&mut self, path: &Path) -> Result<PathBuf> {
        for lib in shared_libraries(path)? {
            self.add_host_file(&lib, 0o755)?;
        }
        let guest = guest_path(path)?;
        self.insert(
            guest.clone(),
            0o755,
            Entry::Host {
                from: path.to_path_buf(),
                strip: true,
            },
        )?;
        Ok(guest)
    }

    /// Adds a host file (a library, data, fixtures) at its host path unless the base has it.
    /// Returns the guest path.
    pub fn add_host_file(&mut self, path: &Path, mode: u32) -> Result<PathBuf> {
        let guest = guest_path(path)?;
        if !self.image.files.contains(&guest) {
            self.insert(
                guest.clone(),
                mode,
                Entry::Host {
                    from: path.to_path_buf(),
                    strip: false,
                },
            )?;
        }
        Ok(guest)
    }

    /// Adds a file with the given contents at `guest_path`.
    pub fn add_data(
        &mut self,
        guest_path: impl Into<PathBuf>,
        mode: u32,
        data: impl Into<Vec<u8>>,
    ) -> Result<()> {
        self.insert(guest_path.into(), mode, Entry::Data(data.into()))
    }

    fn insert(&mut self, path: PathBuf, mode: u32, entry: Entry) -> Result<()> {
        let first = path.components().nth(1);
        if let Some(Component::Normal(top)) = first
            && BASE_SYMLINKS.iter().any(|s| top == *s)
        {
            return Err(Error::Setup(format!(
                "payload path {} would replace the base image's /{} symlink",
                path.display(),
                top.to_string_lossy()
            )));
        }
        if !path.is_absolute() {
            return Err(Error::Setup(format!(
                "payload path {} is not absolute",
                path.display()
            )));
        }
        self.entries.insert(path, (mode, entry));
        Ok(())
    }

    /// Writes the payload as a newc archive: directories the base lacks, then the files.
    pub fn write(&self, out: &Path) -> Result<()> {
        let file = std::fs::File::create(out).map_err(|e| Error::io(out, e))?;
        let mut w = cpio::Writer::new(std::io::BufWriter::new(file));
        let mut dirs_done: HashSet<PathBuf> = HashSet::new();
        for (path, (mode, entry)) in &self.entries {
            for dir in path
                .ancestors()
                .skip(1)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                if dir == Path::new("/")
                    || self.image.files.contains(dir)
                    || !dirs_done.insert(dir.to_path_buf())
                {
                    continue;
                }
                w.dir(&dir.to_string_lossy(), 0o755)
                    .map_err(|e| Error::io(out, e))?;
            }
            let data = match entry {
                Entry::Data(d) => d.clone(),
                Entry::Host { from, strip } => read_host(from, *strip)?,
            };
            w.file(&path.to_string_lossy(), *mode, &data)
                .map_err(|e| Error::io(out, e))?;
        }
        w.finish().map_err(|e| Error::io(out, e))?;
        Ok(())
    }
}

/// Where a host file goes in the guest: its absolute host path, except that a path through one
/// of the merged-/usr symlinks (`/lib/x86_64-linux-gnu/libc.so.6`) is resolved to the real
/// directory, keeping the file's own name (a library's soname link must keep its name).
fn guest_path(path: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
    let through_link = matches!(abs.components().nth(1),
        Some(Component::Normal(top)) if BASE_SYMLINKS.iter().any(|s| top == *s));
    if !through_link {
        return Ok(abs);
    }
    let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
        return Err(Error::Setup(format!("bad payload path {}", abs.display())));
    };
    let dir = std::fs::canonicalize(parent).map_err(|e| Error::io(parent, e))?;
    Ok(dir.join(name))
}

/// Reads a host file, stripping debug sections from ELF executables with `objcopy`.
fn read_host(path: &Path, strip: bool) -> Result<Vec<u8>> {
    if strip {
        let tmp = std::env::temp_dir().join(format!(
            "lab-strip-{}-{}",
            std::process::id(),
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        let ok = Command::new("objcopy")
            .arg("--strip-debug")
            .arg(path)
            .arg(&tmp)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            let data = std::fs::read(&tmp).map_err(|e| Error::io(&tmp, e));
            let _ = std::fs::remove_file(&tmp);
            return data;
        }
    }
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

/// The shared libraries `ldd` names for an executable (empty for static ones).
fn shared_libraries(exe: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .map_err(|e| Error::Setup(format!("ldd: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            match l.split_once("=> ") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => l.split_whitespace().next().filter(|p| p.starts_with('/')),
            }
        })
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect())
}
