module github.com/dlock-dev/dlock

go 1.26

require (
	github.com/valkey-io/valkey-go v1.0.79 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
