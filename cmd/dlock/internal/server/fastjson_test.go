package server

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// The same structs without decodeFast: encoding/json alone.
type (
	plainAcquire acquireBody
	plainToken   tokenBody
)

var fastBodies = []string{
	``, ` `, `{}`, ` { } `, `{"ttlMs":5000}`, `{"ttlMs":5000,"waitMs":1000}`, "{\n\t\"ttlMs\" : 0 ,\r\n\"mode\":\"shared\"}",
	`{"mode":"shared","limit":3}`, `{"mode":"exclusive","fair":true,"queue":true,"queueTtlMs":2000}`,
	`{"owner":"w1","token":"0123456789abcdef0123456789abcdef"}`, `{"mode":"write","waitMs":300000}`,
	`{"ttlMs":1e3}`, `{"ttlMs":1.0}`, `{"ttlMs":-0}`, `{"ttlMs":-}`, `{"ttlMs":01}`, `{"ttlMs":999999999999999999}`,
	`{"ttlMs":9223372036854775807}`, `{"ttlMs":9223372036854775808}`, `{"ttlMs":"5"}`, `{"ttlMs":true}`, `{"ttlMs":null}`,
	`{"TTLMS":5}`, `{"ttlms":5}`, `{"bogus":1}`, `{"ttlMs":5,"ttlMs":6}`, `{"ttlMs":5}{}`, `{"ttlMs":5} x`, `{"ttlMs":5}}`,
	`{"ttlMs":5,}`, `{,}`, `{"ttlMs"}`, `{"ttlMs":}`, `{"ttlMs" 5}`, `[{"ttlMs":1}]`, `"x"`, `{"fair":truex}`, `{"fair":fals}`,
	`{"fair":"true"}`, `{"fair":1}`, `{"owner":"a\"b"}`, `{"owner":"a\u0041"}`, `{"owner":"é"}`, "{\"owner\":\"a\x01\"}",
	`{"owner":"<&>"}`, `{"token":"abc","mode":"read"}`, `{"token":null}`, `{"token":5}`, `{"token":""}`, `{"Token":"x"}`,
	`{"mode":{}}`, `{"mode":[]}`, `{"ttlMs":5`, `{"ttlMs":5,"mode":"x"`, "{\"mode\":\"x\"\x00}", strings.Repeat(" ", 600) + `{"ttlMs":5}`,
	`{"owner":"` + strings.Repeat("a", 600) + `"}`, "\xff\xfe",
}

// checkFast: decodeJSON, fast path or not, gives what encoding/json alone
// gives, value and error.
func checkFast(t *testing.T, body []byte) {
	t.Helper()
	for _, emptyOK := range []bool{true, false} {
		var a acquireBody
		var pa plainAcquire
		ea, wa := decodeJSON(bytes.NewReader(body), &a, emptyOK), decodeJSON(bytes.NewReader(body), &pa, emptyOK)
		if !reflect.DeepEqual(ea, wa) || !reflect.DeepEqual(plainAcquire(a), pa) {
			t.Errorf("acquire %q: decodeJSON = %+v, %+v; encoding/json gives %+v, %+v", body, a, ea, pa, wa)
		}
		var tb tokenBody
		var pt plainToken
		et, wt := decodeJSON(bytes.NewReader(body), &tb, emptyOK), decodeJSON(bytes.NewReader(body), &pt, emptyOK)
		if !reflect.DeepEqual(et, wt) || !reflect.DeepEqual(plainToken(tb), pt) {
			t.Errorf("token %q: decodeJSON = %+v, %+v; encoding/json gives %+v, %+v", body, tb, et, pt, wt)
		}
	}
}

func TestFastDecode(t *testing.T) {
	for _, b := range fastBodies {
		checkFast(t, []byte(b))
	}
	// The common bodies do take the fast path.
	for _, b := range []string{`{"ttlMs":30000}`, `{"token":"0123456789abcdef0123456789abcdef"}`} {
		var a acquireBody
		var tb tokenBody
		if !a.decodeFast([]byte(b)) || !tb.decodeFast([]byte(b)) {
			t.Errorf("decodeFast(%s) = false, want true", b)
		}
	}
}

func FuzzFastDecode(f *testing.F) {
	for _, b := range fastBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(checkFast)
}
