module github.com/dlock-dev/dlock/store/zookeeper

go 1.26.0

require (
	github.com/dlock-dev/dlock v0.1.0
	github.com/go-zookeeper/zk v1.0.4
	go.uber.org/goleak v1.3.0
)

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
