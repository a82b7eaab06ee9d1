"""The door for the world: `coworker serve`, one local HTTP server.

`POST /tell` takes the owner's message with the owner's bearer token (as `coworker tell`);
`POST /hooks/NAME` takes a signed webhook from another system (`[[hooks]]`) as an input of
actor `hook:NAME`, author_kind `agent`, never the owner's word, a redelivery taken once.
`app` holds the routes, `guard` the checks every request passes (Host, rate, body size,
token and signature), `server` runs it (in the foreground, or in a thread of the loop), and
`token` keeps the owner's token in state/secrets.toml. This file imports nothing, so that
naming the package (as `coworker init` does for the token) loads no HTTP server.
"""
