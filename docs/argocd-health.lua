-- Argo CD health check for gpupool.dev/GPUPoolProfile.
--
-- Install it in argocd-cm under the key
--   resource.customizations.health.gpupool.dev_GPUPoolProfile
-- (see README, "Argo CD"). It reads the conditions gpupool computes in one place
-- (controllers/status.go, summarize) and is tested by test/argocd with gopher-lua, the
-- Lua interpreter Argo CD itself embeds.
--
--   Paused=True                                  -> Suspended
--   Stalled=True (a person must act)             -> Degraded
--   observedGeneration < generation              -> Progressing (spec not acted on yet)
--   Ready=True                                   -> Healthy
--   Degraded=True and Reconciling is not True    -> Degraded (such as an aborted drain)
--   anything else (Reconciling, not observed yet) -> Progressing
local hs = {}
local conds = {}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    conds[c.type] = c
  end
end

local function is(t)
  return conds[t] ~= nil and conds[t].status == "True"
end

local function say(t, default)
  local c = conds[t]
  if c == nil then
    return default
  end
  return c.reason .. ": " .. c.message
end

if is("Paused") then
  hs.status = "Suspended"
  hs.message = say("Paused", "paused")
  return hs
end
if is("Stalled") then
  hs.status = "Degraded"
  hs.message = say("Stalled", "stalled")
  return hs
end
local gen = obj.metadata.generation
local seen = nil
if obj.status ~= nil then
  seen = obj.status.observedGeneration
end
if gen ~= nil and (seen == nil or seen < gen) then
  hs.status = "Progressing"
  hs.message = "gpupool has not acted on generation " .. gen .. " of the spec yet"
  return hs
end
if is("Ready") then
  hs.status = "Healthy"
  hs.message = say("Ready", "ready")
  return hs
end
if is("Degraded") and not is("Reconciling") then
  hs.status = "Degraded"
  hs.message = say("Degraded", "degraded")
  return hs
end
hs.status = "Progressing"
hs.message = say("Reconciling", say("Ready", "waiting for gpupool to observe the pool"))
return hs
