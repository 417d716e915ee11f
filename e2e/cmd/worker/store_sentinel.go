package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/goredis"
	"github.com/dlock-dev/dlock/store/valkey"
)

// The Sentinel stores: a primary with replicas, found and followed through
// Redis Sentinel. -addrs are the Sentinels. Two stores:
//
//	sentinel           store/valkey over valkey-go's Sentinel client
//	                   (ClientOption.Sentinel): it asks a Sentinel for the
//	                   primary, and moves to a new one on +switch-master
//	goredis-sentinel   store/goredis over go-redis's failover client
//	                   (redis.NewFailoverClient)
//
// Options (-opt):
//
//	master=name         the Sentinel master name (default mymaster)
//	url=1               sentinel only: valkey.Dial with the URL
//	                    "redis://<sentinels, comma-separated>?master_set=<name>"
//	                    (valkey-go's URL form of a Sentinel client) in place
//	                    of valkey.Open with ClientOption.Sentinel
//	wait-replicas=n     sentinel only: store/valkey's WithWaitReplicas(n, wait-timeout)
//	wait-timeout=d      its timeout (default 500ms)
func init() {
	extraStores["sentinel"] = openSentinel
	extraStores["goredis-sentinel"] = openGoredisSentinel
}

func masterName(c config) string {
	if m := c.opts["master"]; m != "" {
		return m
	}
	return "mymaster"
}

func openSentinel(ctx context.Context, c config) (store.Store, func(), error) {
	var opts []valkey.Option
	if v := c.opts["wait-replicas"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, nil, fmt.Errorf("-opt wait-replicas=%q: %v", v, err)
		}
		timeout := 500 * time.Millisecond
		if v := c.opts["wait-timeout"]; v != "" {
			if timeout, err = time.ParseDuration(v); err != nil {
				return nil, nil, fmt.Errorf("-opt wait-timeout=%q: %v", v, err)
			}
		}
		opts = append(opts, valkey.WithWaitReplicas(n, timeout))
	}
	var s *valkey.Store
	var err error
	if c.opts["url"] == "1" {
		s, err = valkey.Dial(ctx, "redis://"+strings.Join(c.addrs, ",")+"?master_set="+url.QueryEscape(masterName(c)), opts...)
	} else {
		s, err = valkey.Open(ctx, vk.ClientOption{
			InitAddress: c.addrs,
			Sentinel:    vk.SentinelOption{MasterSet: masterName(c)},
		}, opts...)
	}
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}

func openGoredisSentinel(_ context.Context, c config) (store.Store, func(), error) {
	if c.opts["wait-replicas"] != "" {
		return nil, nil, fmt.Errorf("-opt wait-replicas: store/goredis has no WithWaitReplicas")
	}
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    masterName(c),
		SentinelAddrs: c.addrs,
	})
	s, err := goredis.New(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); client.Close() }, nil
}
