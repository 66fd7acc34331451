//! A ctnetlink datagram (netlink messages of conntrack entries, acks, errors, done) from
//! arbitrary bytes, as the agent's conntrack cleanup decodes it.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/agent/tests/fuzz/decode.rs"]
mod decode;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    decode::ctnetlink(data);
});
