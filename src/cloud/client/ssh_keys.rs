//! Operations on SSH keys: import or generate, read, delete.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    ApiResponse, CreateSshKeyRequest, DeletedBody, SshKey, SshKeyBody, SshKeyCreatedBody,
    SshKeyList,
};
use crate::routes::Operation;

impl CloudClient {
    pub async fn list_ssh_keys(&self) -> Result<SshKeyList, Error> {
        self.fetch(Operation::ListSshKeys, &[]).await
    }

    /// Imports `public_key`, or generates a pair when it is `None` (the private key is in
    /// the answer, once). The answer's `code` says which happened. Never retried by the
    /// client.
    pub async fn create_ssh_key(
        &self,
        request: &CreateSshKeyRequest,
    ) -> Result<ApiResponse<SshKeyCreatedBody>, Error> {
        self.send_response(Operation::CreateSshKey, &[], request)
            .await
    }

    pub async fn get_ssh_key(&self, key_id: &str) -> Result<SshKey, Error> {
        let body: SshKeyBody = self.fetch(Operation::GetSshKey, &[key_id]).await?;
        Ok(body.ssh_key)
    }

    pub async fn delete_ssh_key(&self, key_id: &str) -> Result<DeletedBody, Error> {
        self.fetch(Operation::DeleteSshKey, &[key_id]).await
    }
}
