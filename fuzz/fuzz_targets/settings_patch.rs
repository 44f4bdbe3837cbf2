#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pi_workflows_fuzz::settings_patch(data));
