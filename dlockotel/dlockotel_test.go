package dlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockotel"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tracing is an SDK tracer provider whose ended spans land in memory.
type tracing struct {
	tp  *sdktrace.TracerProvider
	exp *tracetest.InMemoryExporter
}

func newTracing(t *testing.T) *tracing {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return &tracing{tp: tp, exp: exp}
}

// spans returns the ended spans called name.
func (tr *tracing) spans(name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range tr.exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until n spans called name have ended, and returns them.
func (tr *tracing) waitSpans(t *testing.T, name string, n int) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s := tr.spans(name); len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s spans ended within 10s, want %d", len(tr.spans(name)), name, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func newObserver(t *testing.T, tr *tracing, mp *sdkmetric.MeterProvider) *dlockotel.Observer {
	t.Helper()
	opts := []dlockotel.Option{dlockotel.WithTracerProvider(tr.tp)}
	if mp != nil {
		opts = append(opts, dlockotel.WithMeterProvider(mp))
	}
	o, err := dlockotel.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// signallingStore is a real store that tells of every acquire request sent
// to it.
type signallingStore struct {
	store.Store
	acquires chan string
}

func (s signallingStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	g, err := s.Store.Acquire(ctx, req)
	select {
	case s.acquires <- req.Name:
	default:
	}
	return g, err
}

func newLocker(t *testing.T, st store.Store, o *dlockotel.Observer, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := dlock.New(st, append([]dlock.Option{dlock.WithObserver(o.Observe)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestAcquireAndHoldSpans: an acquire and the hold it grants are spans
// under the caller's span; a refusal names the held mode; a contended wait
// counts its attempts and its wait; Extend and Release are spans under the
// caller's, linked to the hold, which ends at the release.
func TestAcquireAndHoldSpans(t *testing.T) {
	tr := newTracing(t)
	o := newObserver(t, tr, nil)
	st := signallingStore{Store: memory.New(), acquires: make(chan string, 64)}
	l := newLocker(t, st, o, dlock.WithBackoff(time.Millisecond, 5*time.Millisecond))
	ctx, caller := tr.tp.Tracer("test").Start(context.Background(), "caller")

	lease, err := l.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.RWMutex("job").TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryRLock of a held name = %v, want ErrLocked", err)
	}
	for len(st.acquires) > 0 {
		<-st.acquires
	}
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ls, err := l.Mutex("job").Lock(wctx)
		if err == nil {
			err = ls.Release(wctx)
		}
		waited <- err
	}()
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Release once the waiter was refused at least once: its acquire span
	// then counts two attempts or more.
	select {
	case <-st.acquires:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter sent no acquire within 10s")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	caller.End()

	acq := tr.waitSpans(t, "dlock.acquire", 3)
	want := []map[attribute.Key]string{
		{"dlock.name": "job", "dlock.mode": "mutex", "dlock.result": "acquired", "dlock.attempts": "1", "dlock.waited": "false", "dlock.fence": fmt.Sprint(lease.Fence())},
		{"dlock.name": "job", "dlock.mode": "read", "dlock.result": "locked", "dlock.attempts": "1", "dlock.held_mode": "mutex"},
		{"dlock.name": "job", "dlock.mode": "mutex", "dlock.result": "acquired", "dlock.waited": "true"},
	}
	for i, w := range want {
		got := attrs(acq[i])
		for k, v := range w {
			if got[k].String() != v {
				t.Errorf("acquire span %d: %s = %q, want %q (all: %v)", i, k, got[k].String(), v, acq[i].Attributes)
			}
		}
		if acq[i].Parent.SpanID() != caller.SpanContext().SpanID() {
			t.Errorf("acquire span %d: parent %v, want the caller's span %v", i, acq[i].Parent.SpanID(), caller.SpanContext().SpanID())
		}
	}
	if got := attrs(acq[2]); got["dlock.attempts"].AsInt64() < 2 || got["dlock.wait_ms"].Type() != attribute.INT64 {
		t.Errorf("waited acquire span: attempts %v, wait_ms %v; want at least 2 attempts and the wait", got["dlock.attempts"].String(), got["dlock.wait_ms"].String())
	}

	// Spans end in no fixed order between the holder and the waiter: the
	// holder's are those of its fence.
	byFence := func(spans tracetest.SpanStubs) tracetest.SpanStub {
		for _, s := range spans {
			if attrs(s)["dlock.fence"].AsInt64() == lease.Fence() {
				return s
			}
		}
		t.Fatalf("no %s span of fence %d", spans[0].Name, lease.Fence())
		return tracetest.SpanStub{}
	}
	first := byFence(tr.waitSpans(t, "dlock.hold", 2))
	release := byFence(tr.waitSpans(t, "dlock.release", 2))
	if got := attrs(first); got["dlock.fence"].AsInt64() != lease.Fence() || got["dlock.end"].AsString() != "released" ||
		first.Parent.SpanID() != caller.SpanContext().SpanID() || first.Status.Code == codes.Error {
		t.Errorf("hold span: %v, parent %v, status %v; want fence %d, released, under the caller", first.Attributes, first.Parent.SpanID(), first.Status, lease.Fence())
	}
	if !first.StartTime.Equal(acq[0].EndTime) {
		t.Errorf("hold span starts at %v, want the end of its acquire %v", first.StartTime, acq[0].EndTime)
	}
	for _, s := range []tracetest.SpanStub{tr.spans("dlock.extend")[0], release} {
		name := s.Name
		if s.Parent.SpanID() != caller.SpanContext().SpanID() || len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != first.SpanContext.SpanID() {
			t.Errorf("%s span: parent %v, links %v; want under the caller, linked to the hold %v", name, s.Parent.SpanID(), s.Links, first.SpanContext.SpanID())
		}
		if got := attrs(s)["dlock.result"].AsString(); got != "ok" {
			t.Errorf("%s span result %q, want ok", name, got)
		}
	}
	if first.EndTime.After(release.StartTime) {
		t.Errorf("hold ends at %v, after its release began at %v", first.EndTime, release.StartTime)
	}
	if n := o.Holds(); n != 0 {
		t.Errorf("%d hold spans still open after every lease was released", n)
	}
}

// TestRenewAndLossSpans: an automatic renewal is a span under the hold
// span; a lease lost (here: not extended in time) ends its hold span with
// an error status and a dlock.lease_lost event; one that Locker.Close ends
// is marked closed, without an error.
func TestRenewAndLossSpans(t *testing.T) {
	tr := newTracing(t)
	o := newObserver(t, tr, nil)
	l, err := dlock.New(memory.New(), dlock.WithObserver(o.Observe))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	renewed, err := l.Mutex("renewed", dlock.WithTTL(10*time.Second), dlock.WithAutoRenew(), dlock.WithRenewInterval(50*time.Millisecond)).TryLock(ctx)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	lost, err := l.Mutex("lost", dlock.WithTTL(100*time.Millisecond)).TryLock(ctx)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	renew := tr.waitSpans(t, "dlock.renew", 1)[0]
	<-lost.Done()
	l.Close()
	<-renewed.Done()
	holds := map[string]tracetest.SpanStub{}
	for _, s := range tr.waitSpans(t, "dlock.hold", 2) {
		holds[attrs(s)["dlock.name"].AsString()] = s
	}
	lostHold, closedHold := holds["lost"], holds["renewed"]
	if renew.Parent.SpanID() != closedHold.SpanContext.SpanID() {
		t.Errorf("renew span parent %v, want the hold span %v", renew.Parent.SpanID(), closedHold.SpanContext.SpanID())
	}
	if lostHold.Status.Code != codes.Error || attrs(lostHold)["dlock.end"].AsString() != "lost" || len(lostHold.Events) != 1 || lostHold.Events[0].Name != "dlock.lease_lost" {
		t.Errorf("hold span of a lost lease: status %v, attributes %v, events %v; want an error, end=lost, a dlock.lease_lost event", lostHold.Status, lostHold.Attributes, lostHold.Events)
	}
	if closedHold.Status.Code == codes.Error || attrs(closedHold)["dlock.end"].AsString() != "closed" {
		t.Errorf("hold span of a lease ended by Close: status %v, attributes %v; want no error, end=closed", closedHold.Status, closedHold.Attributes)
	}
	if lostHold.Parent.IsValid() {
		t.Errorf("hold span of a caller without a span has parent %v, want a root span", lostHold.Parent)
	}
}

// TestLossBeforeAcquire: a lease lost before the acquire that got it is
// reported (its validity ran out meanwhile) gets a hold span that ends at
// once, lost, and leaves nothing open.
func TestLossBeforeAcquire(t *testing.T) {
	tr := newTracing(t)
	o := newObserver(t, tr, nil)
	start := time.Now()
	o.Observe(dlock.Event{Kind: dlock.EventLeaseLost, Mode: dlock.ModeMutex, Name: "early", Lease: 7, Fence: 3, Err: dlock.ErrLeaseLost})
	o.Observe(dlock.Event{Kind: dlock.EventAcquire, Mode: dlock.ModeMutex, Name: "early", Result: "acquired", Lease: 7, Fence: 3, Start: start, Duration: time.Millisecond})
	holds := tr.spans("dlock.hold")
	if len(holds) != 1 || attrs(holds[0])["dlock.end"].AsString() != "lost" || holds[0].EndTime.Before(holds[0].StartTime) {
		t.Fatalf("hold spans %v, want one ended lost, not before its start", holds)
	}
	if n := o.Holds(); n != 0 {
		t.Errorf("%d hold spans open, want 0", n)
	}
}

// TestMetrics: the OTel instruments count what dlockprom's series count,
// with the same attributes, and no lock name among them.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	tr := newTracing(t)
	o := newObserver(t, tr, mp)
	for _, ev := range []dlock.Event{
		{Kind: dlock.EventAcquire, Mode: dlock.ModeMutex, Name: "a", Result: "acquired", Duration: time.Millisecond, Lease: 1},
		{Kind: dlock.EventAcquire, Mode: dlock.ModeMutex, Name: "a", Result: "locked", Duration: time.Second, Waited: true},
		{Kind: dlock.EventAcquire, Mode: dlock.ModeRead, Name: "b", Result: "acquired", Lease: 2},
		{Kind: dlock.EventAcquire, Mode: dlock.ModeRead, Name: "b", Result: "error"},
		{Kind: dlock.EventAcquire, Mode: dlock.Mode(99), Name: "c", Result: "weird"},
		{Kind: dlock.EventRenew, Mode: dlock.ModeMutex, Name: "a", Result: "ok", Lease: 1},
		{Kind: dlock.EventRenew, Mode: dlock.ModeMutex, Name: "a", Result: "error", Lease: 1},
		{Kind: dlock.EventRelease, Mode: dlock.ModeMutex, Name: "a", Result: "ok", Duration: 2 * time.Second, Lease: 1},
		{Kind: dlock.EventLeaseLost, Mode: dlock.ModeRead, Name: "b", Duration: 3 * time.Second, Lease: 2},
		// A lease Locker.Close ended: held no more, not counted as lost.
		{Kind: dlock.EventAcquire, Mode: dlock.ModeFair, Name: "d", Result: "acquired", Lease: 3},
		{Kind: dlock.EventLeaseLost, Mode: dlock.ModeFair, Name: "d", Duration: time.Second, Lease: 3, Err: errors.Join(dlock.ErrLeaseLost, dlock.ErrClosed)},
	} {
		o.Observe(ev)
	}
	ctx := context.Background()
	o.FencingRejected(ctx)
	o.StoreError(ctx, "release")
	o.StoreError(ctx, "bogus")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // "name{k=v,...}" -> value or histogram count
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name+p.Attributes.Encoded(attribute.DefaultEncoder())] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name+p.Attributes.Encoded(attribute.DefaultEncoder())] = float64(p.Count)
				}
			}
			for k := range got {
				if len(k) > 0 && (strings.HasSuffix(k, "=a") || strings.Contains(k, "=a,") || strings.HasSuffix(k, "=b") || strings.HasSuffix(k, "=c")) {
					t.Errorf("series %s has a lock name as an attribute value", k)
				}
			}
		}
	}
	for series, want := range map[string]float64{
		"dlock.acquirepattern=mutex,result=acquired": 1,
		"dlock.acquirepattern=mutex,result=locked":   1,
		"dlock.acquirepattern=read,result=acquired":  1,
		"dlock.acquirepattern=read,result=error":     1,
		"dlock.acquirepattern=other,result=other":    1,
		"dlock.acquire.durationpattern=mutex":        2,
		"dlock.wait.durationpattern=mutex":           1,
		"dlock.hold.durationpattern=mutex":           1,
		"dlock.hold.durationpattern=read":            1,
		"dlock.hold.durationpattern=fair":            1,
		"dlock.renewalsresult=ok":                    1,
		"dlock.renewalsresult=error":                 1,
		"dlock.leases.lost":                          1,
		"dlock.leases.held":                          0,
		"dlock.fencing.rejections":                   1,
		"dlock.store.errorsop=acquire":               1,
		"dlock.store.errorsop=extend":                1,
		"dlock.store.errorsop=release":               1,
		"dlock.store.errorsop=other":                 1,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if t.Failed() {
		t.Logf("collected: %v", got)
	}
}

// BenchmarkObserve is the cost an acquire and a release add to a Locker
// with the OTel observer: SDK tracer (spans sampled, no exporter) and SDK
// meter (a manual reader).
func BenchmarkObserve(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	o, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	acq := dlock.Event{Kind: dlock.EventAcquire, Mode: dlock.ModeMutex, Name: "a", Result: "acquired", Duration: time.Millisecond, Context: ctx, Lease: 1, Start: time.Now(), Attempts: 1}
	rel := dlock.Event{Kind: dlock.EventRelease, Mode: dlock.ModeMutex, Name: "a", Result: "ok", Duration: time.Second, Context: ctx, Lease: 1, Start: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		o.Observe(acq)
		o.Observe(rel)
	}
}

// TestHoldSpanOwner: the dlock.hold span names who holds the lease
// (dlock.WithHolder), and leaves the attribute out when none was set.
func TestHoldSpanOwner(t *testing.T) {
	tr := newTracing(t)
	o := newObserver(t, tr, nil)
	l, err := dlock.New(memory.New(), dlock.WithObserver(o.Observe))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	owned, err := l.Mutex("owned", dlock.WithHolder("billing-7/4242")).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := l.Mutex("plain").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := owned.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plain.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range tr.waitSpans(t, "dlock.hold", 2) {
		a := attrs(s)
		want := map[string]string{"owned": "billing-7/4242", "plain": ""}[a["dlock.name"].AsString()]
		if got := a["dlock.owner"].AsString(); got != want {
			t.Errorf("hold span of %s: dlock.owner = %q, want %q", a["dlock.name"].AsString(), got, want)
		}
	}
}
