//! Startup scripts: create, read, update, delete one or several.

use gpucloud_cloud::model;

use super::Call;
use crate::error::ApiError;
use crate::reply::Reply;

pub(super) fn list_startup_scripts(call: &Call<'_>) -> Result<Reply, ApiError> {
    call.listed("startup scripts listed", "scripts", |e, now| {
        e.list_scripts(now)
    })
}

pub(super) fn create_startup_script(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::CreateStartupScriptRequest = call.body()?;
    call.engine(|e, now| {
        let script = e.create_script(&body, now)?;
        Reply::new(
            "startup script created",
            model::StartupScriptBody { script },
        )
    })
}

pub(super) fn delete_startup_scripts(call: &Call<'_>) -> Result<Reply, ApiError> {
    let body: model::DeleteStartupScriptsRequest = call.body()?;
    call.engine(|e, now| {
        Reply::new(
            "startup scripts deleted",
            e.delete_scripts(&body.script_ids, now),
        )
    })
}

pub(super) fn get_startup_script(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, _| {
        let script = e.get_script(id)?;
        Reply::new(
            "startup script retrieved",
            model::StartupScriptBody { script },
        )
    })
}

pub(super) fn update_startup_script(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    let body: model::UpdateStartupScriptRequest = call.body()?;
    call.engine(|e, now| {
        let script = e.update_script(id, &body, now)?;
        Reply::new(
            "startup script updated",
            model::StartupScriptBody { script },
        )
    })
}

pub(super) fn delete_startup_script(call: &Call<'_>) -> Result<Reply, ApiError> {
    let id = call.param(0)?;
    call.engine(|e, now| Reply::new("startup script deleted", e.delete_script(id, now)?))
}
