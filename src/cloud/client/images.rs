//! Operations on custom images and on the relation between a snapshot and its image.

use crate::model::{
    CreateImageRequest, DeletedBody, Image, ImageBody, ImageList, RelationBody, RelationList,
    SnapshotImageRelation,
};

calls! {
    fn list_images() -> ImageList = fetch(ListImages, []);
    /// Creates a custom image from an available snapshot. Never retried by the client.
    fn create_image(request: &CreateImageRequest) -> Image
        = send(CreateImage, [], request) .image in ImageBody;
    fn list_snapshot_image_relations() -> RelationList = fetch(ListSnapshotImageRelations, []);
    fn get_snapshot_image_relation(snapshot_id: &str) -> SnapshotImageRelation
        = fetch(GetSnapshotImageRelation, [snapshot_id]) .relation in RelationBody;
    fn get_image(image_id: &str) -> Image = fetch(GetImage, [image_id]) .image in ImageBody;
    fn delete_image(image_id: &str) -> DeletedBody = fetch(DeleteImage, [image_id]);
}
