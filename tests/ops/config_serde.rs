//! With the `serde` feature, a `Config` reads from and writes to a
//! configuration file by the names the library prints; missing settings
//! take their defaults and unknown ones are refused. Run with
//! `cargo test --features serde --test ops config_serde`.

use std::time::Duration;

use ringwal::{
    Backend, Codec, Config, DirectIo, Durability, Level, RecoveryMode, SyncMethod, WhenFull,
};

#[test]
fn a_config_round_trips_and_a_file_names_settings_as_the_library_does() {
    let cfg = Config::builder()
        .node(7)
        .segment_bytes(8 << 20)
        .backend(Backend::Threaded)
        .durability(Durability::Deferred {
            sync_interval: Some(Duration::from_millis(50)),
        })
        .sync_method(SyncMethod::WriteThenFdatasync)
        .direct_io(DirectIo::Off)
        .wait_spin(Duration::from_micros(150))
        .recovery(RecoveryMode::PointInTime)
        .create_if_missing(false)
        .compression(Codec::Lz4, 512)
        .soft_log_bytes(Some(256 << 20))
        .max_log_bytes(
            Some(1 << 30),
            WhenFull::Block {
                timeout: Duration::from_millis(250),
            },
        )
        .build();
    let text = serde_json::to_string(&cfg).unwrap();
    assert!(text.contains("\"backend\":\"threaded\""), "{text}");
    assert!(
        text.contains("\"sync_method\":\"write-then-fdatasync\""),
        "{text}"
    );
    assert!(text.contains("\"recovery\":\"point-in-time\""), "{text}");
    let back: Config = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
    assert_eq!(back.node(), 7);
    assert_eq!(back.default_level(), Level::Written);
    assert_eq!(back.durability(), cfg.durability());
    assert_eq!(back.compression(), cfg.compression());
    assert_eq!(back.compression().codec, Codec::Lz4);
    assert_eq!(back.max_log_bytes(), cfg.max_log_bytes());
    assert_eq!(back.soft_log_bytes(), Some(256 << 20));
    assert_eq!(back.wait_spin(), Duration::from_micros(150));

    // A file with one setting: the rest are the defaults.
    let partial: Config =
        serde_json::from_str(r#"{"node": 3, "durability": "every-write"}"#).unwrap();
    assert_eq!(partial.node(), 3);
    assert_eq!(partial.segment_bytes(), Config::default().segment_bytes());
    assert_eq!(partial.durability(), Durability::EveryWrite);
    // Durations as people write them.
    assert!(text.contains("\"sync_interval\":\"50ms\""), "{text}");
    assert!(text.contains("\"timeout\":\"250ms\""), "{text}");
    assert!(text.contains("\"wait_spin\":\"150us\""), "{text}");
    let written: Config = serde_json::from_str(
        r#"{"durability": {"deferred": {"sync_interval": "2s"}},
            "max_log_bytes": 1073741824,
            "when_full": {"block": {"timeout": "1m 30s"}}}"#,
    )
    .unwrap();
    assert_eq!(
        written.durability(),
        Durability::Deferred {
            sync_interval: Some(Duration::from_secs(2))
        }
    );
    let (_, when_full) = written.max_log_bytes().unwrap();
    assert_eq!(
        when_full,
        WhenFull::Block {
            timeout: Duration::from_secs(90)
        }
    );
    let e = serde_json::from_str::<Config>(
        r#"{"durability": {"deferred": {"sync_interval": "soon"}}}"#,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("soon") || e.to_string().contains("unit"),
        "{e}"
    );
    // A misspelt setting is an error, not silently the default.
    let e = serde_json::from_str::<Config>(r#"{"segment_byte": 1}"#).unwrap_err();
    assert!(e.to_string().contains("segment_byte"), "{e}");
}
