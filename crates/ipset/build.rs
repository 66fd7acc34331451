//! Links libipset through pkg-config.
fn main() {
    pkg_config::Config::new()
        .atleast_version("7")
        .probe("libipset")
        .expect("libipset not found: install Debian's libipset-dev");
}
