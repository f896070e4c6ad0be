module lenrpc_go

go 1.24
