#![no_main]

#[global_allocator]
static ALLOC: sextant_fuzz::alloc::Capped = sextant_fuzz::alloc::Capped;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sextant_fuzz::alloc::set_input(data);
    sextant_fuzz::targets::raft_log(data);
    sextant_fuzz::alloc::clear_input();
});
