//! Links libipset through pkg-config, compiles the C shim that bridges
//! libipset's variadic output callback, and generates the FFI declarations
//! with bindgen into `OUT_DIR`.
use std::env;
use std::path::PathBuf;

fn main() {
    let lib = pkg_config::Config::new()
        .atleast_version("7")
        .probe("libipset")
        .expect("libipset not found: install Debian's libipset-dev (tests/setup.sh does)");

    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc/wrapper.h");

    cc::Build::new()
        .file("csrc/shim.c")
        .includes(&lib.include_paths)
        .warnings(true)
        .extra_warnings(true)
        .compile("ipset_rs_shim");

    let mut builder = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_arg("-Icsrc")
        .allowlist_function("^ipset_.*")
        .allowlist_type("^ipset_.*")
        .allowlist_var("^IPSET_.*")
        .allowlist_type("^nfproto$")
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder
        .generate()
        .expect("bindgen could not read libipset's headers (is libclang-dev installed?)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("sys.rs"))
        .expect("cannot write bindings");
}
