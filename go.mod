module github.com/dlock-dev/dlock

go 1.26

require go.uber.org/goleak v1.3.0 // indirect
