//! A `ManifestSink` that records every announcement: shared by the manifest-tracker tests.

use mcpl::manifest::{ManifestChanged, ManifestSink};
use std::sync::Mutex;

/// Records the `mcpl/manifestChanged` params the tracker delivers.
#[derive(Default)]
pub struct Recorder(Mutex<Vec<ManifestChanged>>);

impl ManifestSink for Recorder {
    fn manifest_changed(&self, change: ManifestChanged) {
        self.0.lock().unwrap().push(change);
    }
}

impl Recorder {
    /// The announcements delivered since the last call.
    pub fn take(&self) -> Vec<ManifestChanged> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}
