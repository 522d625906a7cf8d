//! Operations on startup scripts: create, read, update, delete one or several.

use crate::model::{
    CreateStartupScriptRequest, DeleteStartupScriptsBody, DeleteStartupScriptsRequest, DeletedBody,
    StartupScript, StartupScriptBody, StartupScriptList, UpdateStartupScriptRequest,
};

calls! {
    fn list_startup_scripts() -> StartupScriptList = fetch(ListStartupScripts, []);
    /// Creates a startup script. Never retried by the client.
    fn create_startup_script(request: &CreateStartupScriptRequest) -> StartupScript
        = send(CreateStartupScript, [], request) .script in StartupScriptBody;
    fn get_startup_script(script_id: &str) -> StartupScript
        = fetch(GetStartupScript, [script_id]) .script in StartupScriptBody;
    fn update_startup_script(script_id: &str, request: &UpdateStartupScriptRequest)
        -> StartupScript
        = send(UpdateStartupScript, [script_id], request) .script in StartupScriptBody;
    fn delete_startup_script(script_id: &str) -> DeletedBody
        = fetch(DeleteStartupScript, [script_id]);
    /// Deletes every script in `script_ids`; ids that do not exist are reported, not refused.
    fn delete_startup_scripts(script_ids: &[String]) -> DeleteStartupScriptsBody
        = send(DeleteStartupScripts, [], &DeleteStartupScriptsRequest { script_ids: script_ids.to_vec() });
}
