-- wrk script of bench/mixed/record.sh: four kinds of request in turn.
local n = 0
request = function()
  n = n + 1
  local k = n % 4
  if k == 0 then return wrk.format("GET", "/api/users/" .. (n % 1000))
  elseif k == 1 then return wrk.format("GET", "/static/app.js?v=" .. (n % 50))
  elseif k == 2 then return wrk.format("POST", "/api/orders", {["Content-Type"]="application/json"}, '{"item":42,"qty":3}')
  else return wrk.format("GET", "/healthz") end
end
