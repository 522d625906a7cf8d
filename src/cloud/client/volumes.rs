//! Operations on volumes: list, create, resize, clone, delete, types and billing.

use crate::model::{
    CloneVolumeRequest, CreateVolumeRequest, DeletedBody, ResizeVolumeRequest, Volume,
    VolumeBillingPage, VolumeBillingQuery, VolumeBody, VolumeList, VolumeListQuery, VolumeTypeList,
};

calls! {
    fn list_volumes(query: &VolumeListQuery) -> VolumeList = fetch_query(ListVolumes, [], query);
    /// Creates a volume. Never retried by the client (see [`Self::create_instance`]).
    fn create_volume(request: &CreateVolumeRequest) -> Volume
        = send(CreateVolume, [], request) .volume in VolumeBody;
    fn get_volume_billing(query: &VolumeBillingQuery) -> VolumeBillingPage
        = fetch_query(GetVolumeBilling, [], query);
    fn list_volume_types() -> VolumeTypeList = fetch(ListVolumeTypes, []);
    fn get_volume(volume_id: &str) -> Volume
        = fetch(GetVolume, [volume_id]) .volume in VolumeBody;
    fn delete_volume(volume_id: &str) -> DeletedBody = fetch(DeleteVolume, [volume_id]);
    /// Grows a volume to `size` GB.
    fn resize_volume(volume_id: &str, size: u64) -> Volume
        = send(ResizeVolume, [volume_id], &ResizeVolumeRequest { size }) .volume in VolumeBody;
    /// Clones a volume into a new one named `name`. Never retried by the client.
    fn clone_volume(volume_id: &str, name: &str) -> Volume
        = send(CloneVolume, [volume_id], &CloneVolumeRequest { name: name.to_owned() })
        .volume in VolumeBody;
}
