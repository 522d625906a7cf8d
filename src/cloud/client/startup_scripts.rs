//! Operations on startup scripts: create, read, update, delete one or several.

use super::CloudClient;
use crate::error::Error;
use crate::model::{
    CreateStartupScriptRequest, DeleteStartupScriptsBody, DeleteStartupScriptsRequest, DeletedBody,
    StartupScript, StartupScriptBody, StartupScriptList, UpdateStartupScriptRequest,
};
use crate::routes::Operation;

impl CloudClient {
    pub async fn list_startup_scripts(&self) -> Result<StartupScriptList, Error> {
        self.fetch(Operation::ListStartupScripts, &[]).await
    }

    /// Creates a startup script. Never retried by the client.
    pub async fn create_startup_script(
        &self,
        request: &CreateStartupScriptRequest,
    ) -> Result<StartupScript, Error> {
        let op = Operation::CreateStartupScript;
        let body: StartupScriptBody = self.send(op, &[], request).await?;
        Ok(body.script)
    }

    /// Deletes every script in `script_ids`; ids that do not exist are reported, not refused.
    pub async fn delete_startup_scripts(
        &self,
        script_ids: &[String],
    ) -> Result<DeleteStartupScriptsBody, Error> {
        let request = DeleteStartupScriptsRequest {
            script_ids: script_ids.to_vec(),
        };
        self.send(Operation::DeleteStartupScripts, &[], &request)
            .await
    }

    pub async fn get_startup_script(&self, script_id: &str) -> Result<StartupScript, Error> {
        let op = Operation::GetStartupScript;
        let body: StartupScriptBody = self.fetch(op, &[script_id]).await?;
        Ok(body.script)
    }

    pub async fn update_startup_script(
        &self,
        script_id: &str,
        request: &UpdateStartupScriptRequest,
    ) -> Result<StartupScript, Error> {
        let op = Operation::UpdateStartupScript;
        let body: StartupScriptBody = self.send(op, &[script_id], request).await?;
        Ok(body.script)
    }

    pub async fn delete_startup_script(&self, script_id: &str) -> Result<DeletedBody, Error> {
        self.fetch(Operation::DeleteStartupScript, &[script_id])
            .await
    }
}
