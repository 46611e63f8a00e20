//! Object storage, against a real S3 server: a single Garage node
//! (`common::library::garage`). For now, the harness itself: the tests
//! that archive segments rely on its bucket, key and environment
//! reaching S3, and on `stop` and `restart` taking S3 away and bringing
//! back the same objects.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig};

use crate::common::library::garage::Garage;

/// A client for the whole bucket, built the way a child process given
/// `garage.env()` and an `s3://` URL would build one, with no retries: an
/// unreachable server must show at once, not after minutes of backoff.
fn client(garage: &Garage) -> Arc<dyn ObjectStore> {
    let mut builder = AmazonS3Builder::new();
    for (name, value) in garage.env() {
        let key: AmazonS3ConfigKey = name
            .to_ascii_lowercase()
            .parse()
            .unwrap_or_else(|e| panic!("{name} is no object_store setting: {e}"));
        builder = builder.with_config(key, value);
    }
    let retry = RetryConfig {
        max_retries: 0,
        retry_timeout: Duration::from_secs(10),
        ..RetryConfig::default()
    };
    let s3 = builder
        .with_url(garage.s3_url(""))
        .with_retry(retry)
        .build()
        .expect("an S3 client for Garage");
    Arc::new(s3)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn garage_keeps_objects_across_a_restart() {
    let Some(mut garage) = Garage::start() else {
        return;
    };
    assert_eq!(
        garage.s3_url("a/b"),
        format!("s3://{}/a/b", garage.bucket())
    );
    let s3 = client(&garage);
    let rt = runtime();
    let path = Path::from("smoke/segment-1");
    let body: Vec<u8> = (0..=255u8).cycle().take(300 << 10).collect();

    rt.block_on(s3.put(&path, body.clone().into()))
        .expect("PUT");
    let got = rt
        .block_on(async { s3.get(&path).await?.bytes().await })
        .expect("GET");
    assert_eq!(
        got.as_ref(),
        body.as_slice(),
        "GET returned other bytes than PUT stored"
    );
    let missing = rt.block_on(s3.get(&Path::from("smoke/absent")));
    assert!(
        matches!(missing, Err(object_store::Error::NotFound { .. })),
        "an absent object must be NotFound, got {missing:?}"
    );

    garage.stop();
    assert!(garage.pid().is_none());
    let down = rt.block_on(s3.get(&path));
    assert!(down.is_err(), "GET succeeded with the server stopped");

    garage.restart();
    let got = rt
        .block_on(async { s3.get(&path).await?.bytes().await })
        .expect("GET after restart");
    assert_eq!(
        got.as_ref(),
        body.as_slice(),
        "the object changed across the restart"
    );
    // Still writable, with the same key.
    let after = Path::from("smoke/segment-2");
    rt.block_on(s3.put(&after, b"after".to_vec().into()))
        .expect("PUT after restart");
    let listed = rt
        .block_on(s3.list_with_delimiter(Some(&Path::from("smoke"))))
        .expect("LIST");
    let mut names: Vec<String> = listed
        .objects
        .iter()
        .map(|m| m.location.to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["smoke/segment-1", "smoke/segment-2"]);
}
