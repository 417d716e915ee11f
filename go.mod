module github.com/dlock-dev/dlock

go 1.26.0

require (
	github.com/valkey-io/valkey-go v1.0.79
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
