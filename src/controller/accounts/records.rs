//! What every kind's cloud calls share: how a record gives its id, name, state and creation
//! time ([`cloud_record!`]), and a read by id that answers `None` for the cloud's 404. Each
//! kind's own calls ([`crate::accounts::observer::CloudResource`]) are in its module.

use gpucloud_cloud::Error as CloudError;
use k8s_openapi::jiff::Timestamp;

/// Implements [`crate::accounts::observer::CloudRecord`] for a cloud model type from its id and name
/// fields and its state: the record's `status` field, or a fixed state for resources the
/// cloud reports none for.
macro_rules! cloud_record {
    ($record:ty, id: $id:ident, name: $name:ident, state: status) => {
        $crate::accounts::records::cloud_record!(@impl $record, $id, $name, |r: &$record| r.status.as_str().to_string());
    };
    ($record:ty, id: $id:ident, name: $name:ident, state: $fixed:literal) => {
        $crate::accounts::records::cloud_record!(@impl $record, $id, $name, |_: &$record| $fixed.to_string());
    };
    (@impl $record:ty, $id:ident, $name:ident, $state:expr) => {
        impl $crate::accounts::observer::CloudRecord for $record {
            fn id(&self) -> &str {
                &self.$id
            }
            fn name(&self) -> &str {
                &self.$name
            }
            fn state(&self) -> String {
                ($state)(self)
            }
            fn created_at(&self) -> Option<k8s_openapi::jiff::Timestamp> {
                $crate::accounts::records::parse_time(&self.created_at)
            }
        }
    };
}
pub(crate) use cloud_record;

/// The cloud's creation time, when it parses.
pub(crate) fn parse_time(value: &str) -> Option<Timestamp> {
    value.parse().ok()
}

/// A read by id, with the cloud's 404 as `None`.
pub(crate) fn found<R>(read: Result<R, CloudError>) -> Result<Option<R>, CloudError> {
    match read {
        Ok(record) => Ok(Some(record)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

/// A delete, with the cloud's 404 (gone already) as success.
pub(crate) fn gone<T>(delete: Result<T, CloudError>) -> Result<(), CloudError> {
    match delete {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}
