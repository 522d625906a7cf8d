-- Argo CD health of an Application, for an app-of-apps whose sync waves order its children
-- (examples/gitops/argocd/root.yaml): Argo CD has had no health check for Applications since
-- 1.8, so without one the next wave starts at once. A child is Healthy only once it is synced
-- to its target and its own health is Healthy: a child whose sync has not applied everything
-- yet holds the next wave even while the resources it has read healthy.
-- Written for Argo CD's Lua (gopher-lua, Lua 5.1): `obj` is the live Application.
local hs = {}

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "not synced yet"
  return hs
end

local health = obj.status.health or {}
local sync = obj.status.sync or {}

if health.status == "Degraded" then
  hs.status = "Degraded"
  hs.message = health.message or "an object of the Application is Degraded"
  return hs
end

if health.status == "Healthy" and sync.status == "Synced" then
  hs.status = "Healthy"
  hs.message = ""
  return hs
end

hs.status = "Progressing"
hs.message = "health " .. (health.status or "unknown") .. ", sync " .. (sync.status or "unknown")
return hs
