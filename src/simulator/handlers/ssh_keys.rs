//! SSH keys: import or generate, read, delete.

use gpucloud_cloud::model::{self, success_code};

use super::Call;
use crate::error::ApiError;
use crate::reply::Reply;

pub(super) fn list_ssh_keys(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("SSH keys listed", "ssh_keys", |e, now| e.list_ssh_keys(now))
}

/// The answer's `code` says whether the key was imported or generated.
pub(super) fn create_ssh_key(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::CreateSshKeyRequest = call.body()?;
    call.engine(|e, now| {
        let created = e.create_ssh_key(&body, now)?;
        let (message, code) = if created.private_key.is_some() {
            (
                "SSH key pair generated; the private key is shown only once",
                success_code::SSH_KEY_GENERATED,
            )
        } else {
            ("SSH key imported", success_code::SSH_KEY_IMPORTED)
        };
        Ok(Reply::new(
            message,
            model::SshKeyCreatedBody {
                key: created.key,
                private_key: created.private_key,
            },
        )?
        .code(code))
    })
}

pub(super) fn get_ssh_key(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, _| {
        let ssh_key = e.get_ssh_key(id)?;
        Reply::new("SSH key retrieved", model::SshKeyBody { ssh_key })
    })
}

pub(super) fn delete_ssh_key(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| Reply::new("SSH key deleted", e.delete_ssh_key(id, now)?))
}
