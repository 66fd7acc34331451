//! A generic-netlink IPVS message (genlmsghdr and attributes) from arbitrary bytes, through
//! the wire layer, the typed layer of every object and ipvsadm's renderings.
#![no_main]

#[path = "../../crates/ipvs-netlink/tests/fuzz/decode.rs"]
mod decode;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    decode::decode(data);
});
