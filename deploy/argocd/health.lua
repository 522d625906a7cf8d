-- Argo CD health of every gpucloud.io kind, from its kstatus conditions (Ready, Reconciling,
-- Stalled) and observedGeneration. Installed once per kind in argocd-cm (argocd-cm.yaml).
-- Written for Argo CD's Lua (gopher-lua, Lua 5.1): `obj` is the live object.
local hs = {}

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deleting: the cloud resource is being removed"
  return hs
end

if obj.metadata ~= nil and obj.metadata.annotations ~= nil
    and obj.metadata.annotations["gpucloud.io/paused"] == "true" then
  hs.status = "Suspended"
  hs.message = "Paused by the gpucloud.io/paused annotation"
  return hs
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report"
  return hs
end

-- A status written for an older spec says nothing about the current one.
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = {}
for _, condition in ipairs(status.conditions) do
  conditions[condition.type] = condition
end

local function describe(condition)
  local text = condition.reason or ""
  if condition.message ~= nil and condition.message ~= "" then
    if text ~= "" then
      text = text .. ": "
    end
    text = text .. condition.message
  end
  return text
end

local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

local ready = conditions["Ready"]
local reconciling = conditions["Reconciling"]
if ready ~= nil and ready.status == "True" and (reconciling == nil or reconciling.status ~= "True") then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = describe(reconciling)
elseif ready ~= nil then
  hs.message = describe(ready)
else
  hs.message = "Waiting for the Ready condition"
end
return hs
