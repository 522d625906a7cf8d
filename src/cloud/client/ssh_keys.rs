//! Operations on SSH keys: import or generate, read, delete.

use crate::model::{
    ApiResponse, CreateSshKeyRequest, DeletedBody, SshKey, SshKeyBody, SshKeyCreatedBody,
    SshKeyList,
};

calls! {
    fn list_ssh_keys() -> SshKeyList = fetch(ListSshKeys, []);
    /// Imports `public_key`, or generates a pair when it is `None` (the private key is in
    /// the answer, once). The answer's `code` says which happened. Never retried by the
    /// client.
    fn create_ssh_key(request: &CreateSshKeyRequest) -> ApiResponse<SshKeyCreatedBody>
        = send_response(CreateSshKey, [], request);
    fn get_ssh_key(key_id: &str) -> SshKey = fetch(GetSshKey, [key_id]) .ssh_key in SshKeyBody;
    fn delete_ssh_key(key_id: &str) -> DeletedBody = fetch(DeleteSshKey, [key_id]);
}
