//! Human-readable byte sizes (`760 B`, `1.4 MiB`), shared by the text report and the TUI.

const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// `bytes` in binary units with one decimal above 1 KiB: `760 B`, `1.0 KiB`, `1.4 MiB`.
pub fn human(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    // Round first so that 1023.96 KiB shows as `1.0 MiB`, not `1024.0 KiB`.
    while (value * 10.0).round() / 10.0 >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `human(bytes)`, followed by the exact count when the human form rounds it:
/// `760 B`, `1.4 MiB (1468006 bytes)`.
pub fn human_exact(bytes: u64) -> String {
    if bytes < 1024 {
        human(bytes)
    } else {
        format!("{} ({bytes} bytes)", human(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_a_person_writes_them() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1.0 KiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(1_468_006), "1.4 MiB");
        assert_eq!(human(1024 * 1024 - 1), "1.0 MiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
        assert_eq!(human(u64::MAX), "16.0 EiB");
        assert_eq!(human_exact(760), "760 B");
        assert_eq!(human_exact(1_468_006), "1.4 MiB (1468006 bytes)");
    }
}
