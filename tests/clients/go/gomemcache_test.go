// Package clients runs github.com/bradfitz/gomemcache, a text-protocol client, against
// the server at $CLIENT_TEST_SERVER (host:port). scripts/test-clients starts ferrocache
// and memcached on free ports and runs this once against each; without the variable
// every test is skipped.
package clients

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
)

func client(t *testing.T) *memcache.Client {
	t.Helper()
	server := os.Getenv("CLIENT_TEST_SERVER")
	if server == "" {
		t.Skip("CLIENT_TEST_SERVER not set: run scripts/test-clients")
	}
	mc := memcache.New(server)
	mc.Timeout = 5e9 // 5 s
	if err := mc.FlushAll(); err != nil {
		t.Fatalf("flush_all: %v", err)
	}
	t.Cleanup(func() { mc.Close() })
	return mc
}

func mustSet(t *testing.T, mc *memcache.Client, key, value string) {
	t.Helper()
	if err := mc.Set(&memcache.Item{Key: key, Value: []byte(value)}); err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
}

func wantValue(t *testing.T, mc *memcache.Client, key, want string) {
	t.Helper()
	item, err := mc.Get(key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if string(item.Value) != want {
		t.Fatalf("get %s = %q, want %q", key, item.Value, want)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func TestPing(t *testing.T) {
	if err := client(t).Ping(); err != nil {
		t.Fatal(err)
	}
}

func TestSetGet(t *testing.T) {
	mc := client(t)
	item := &memcache.Item{Key: "a", Value: []byte("hello"), Flags: 4294967295, Expiration: 100}
	if err := mc.Set(item); err != nil {
		t.Fatal(err)
	}
	got, err := mc.Get("a")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Value) != "hello" || got.Flags != 4294967295 {
		t.Fatalf("got %q flags %d", got.Value, got.Flags)
	}
	_, err = mc.Get("missing")
	wantErr(t, "get missing", err, memcache.ErrCacheMiss)

	big := bytes.Repeat([]byte{0, 1, 2, 250, 13, 10}, 100_000)
	if err := mc.Set(&memcache.Item{Key: "big", Value: big}); err != nil {
		t.Fatal(err)
	}
	got, err = mc.Get("big")
	if err != nil || !bytes.Equal(got.Value, big) {
		t.Fatalf("big value did not round-trip: %v", err)
	}
	err = mc.Set(&memcache.Item{Key: "big", Value: make([]byte, 1024*1024+1)})
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("oversized set: %v", err)
	}
	// The failed set dropped the old value, and the connection is still in sync.
	_, err = mc.Get("big")
	wantErr(t, "get big after failed set", err, memcache.ErrCacheMiss)
}

func TestGetMulti(t *testing.T) {
	mc := client(t)
	keys := []string{"missing"}
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("k%d", i)
		mustSet(t, mc, key, "v"+key)
		keys = append(keys, key)
	}
	got, err := mc.GetMulti(keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 {
		t.Fatalf("GetMulti returned %d items, want 100", len(got))
	}
	for key, item := range got {
		if string(item.Value) != "v"+key {
			t.Fatalf("%s = %q", key, item.Value)
		}
	}
}

func TestAddReplaceAppendPrepend(t *testing.T) {
	mc := client(t)
	if err := mc.Add(&memcache.Item{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "add existing", mc.Add(&memcache.Item{Key: "a", Value: []byte("2")}), memcache.ErrNotStored)
	wantErr(t, "replace missing", mc.Replace(&memcache.Item{Key: "b", Value: []byte("2")}), memcache.ErrNotStored)
	if err := mc.Replace(&memcache.Item{Key: "a", Value: []byte("3")}); err != nil {
		t.Fatal(err)
	}
	if err := mc.Append(&memcache.Item{Key: "a", Value: []byte("+")}); err != nil {
		t.Fatal(err)
	}
	if err := mc.Prepend(&memcache.Item{Key: "a", Value: []byte("-")}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "append missing", mc.Append(&memcache.Item{Key: "b", Value: []byte("+")}), memcache.ErrNotStored)
	wantValue(t, mc, "a", "-3+")
}

func TestDelete(t *testing.T) {
	mc := client(t)
	mustSet(t, mc, "a", "1")
	if err := mc.Delete("a"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "delete missing", mc.Delete("a"), memcache.ErrCacheMiss)
	_, err := mc.Get("a")
	wantErr(t, "get deleted", err, memcache.ErrCacheMiss)
	mustSet(t, mc, "b", "1")
	if err := mc.DeleteAll(); err != nil {
		t.Fatal(err)
	}
	_, err = mc.Get("b")
	wantErr(t, "get after DeleteAll", err, memcache.ErrCacheMiss)
}

func TestIncrDecr(t *testing.T) {
	mc := client(t)
	_, err := mc.Increment("n", 1)
	wantErr(t, "incr missing", err, memcache.ErrCacheMiss)
	mustSet(t, mc, "n", "10")
	for _, step := range []struct {
		incr  bool
		delta uint64
		want  uint64
	}{{true, 5, 15}, {false, 3, 12}, {false, 100, 0}, {true, 18446744073709551615, 18446744073709551615}, {true, 1, 0}} {
		var got uint64
		if step.incr {
			got, err = mc.Increment("n", step.delta)
		} else {
			got, err = mc.Decrement("n", step.delta)
		}
		if err != nil || got != step.want {
			t.Fatalf("incr=%v %d: got %d, %v; want %d", step.incr, step.delta, got, err, step.want)
		}
	}
	mustSet(t, mc, "s", "abc")
	if _, err := mc.Increment("s", 1); err == nil || !strings.Contains(err.Error(), "non-numeric") {
		t.Fatalf("incr non-numeric: %v", err)
	}
}

func TestCompareAndSwap(t *testing.T) {
	mc := client(t)
	mustSet(t, mc, "a", "1")
	item, err := mc.Get("a") // gomemcache always asks with gets
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := mc.Get("a")
	item.Value = []byte("2")
	if err := mc.CompareAndSwap(item); err != nil {
		t.Fatal(err)
	}
	stale.Value = []byte("3")
	wantErr(t, "cas with a spent token", mc.CompareAndSwap(stale), memcache.ErrCASConflict)
	wantValue(t, mc, "a", "2")
	if err := mc.Delete("a"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "cas on a deleted key", mc.CompareAndSwap(item), memcache.ErrCacheMiss)
}

func TestTouchAndGetAndTouch(t *testing.T) {
	mc := client(t)
	mustSet(t, mc, "a", "1")
	if err := mc.Touch("a", 100); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "touch missing", mc.Touch("missing", 100), memcache.ErrCacheMiss)
	item, err := mc.GetAndTouch("a", 100)
	if err != nil || string(item.Value) != "1" {
		t.Fatalf("gat: %v %v", item, err)
	}
	_, err = mc.GetAndTouch("missing", 100)
	wantErr(t, "gat missing", err, memcache.ErrCacheMiss)
	// A negative expiry expires at once.
	if err := mc.Touch("a", -1); err != nil {
		t.Fatal(err)
	}
	_, err = mc.Get("a")
	wantErr(t, "get expired", err, memcache.ErrCacheMiss)
}

func TestMalformedKeysStayClientSide(t *testing.T) {
	mc := client(t)
	wantErr(t, "long key", mc.Set(&memcache.Item{Key: strings.Repeat("k", 251), Value: []byte("x")}), memcache.ErrMalformedKey)
	wantErr(t, "key with a space", mc.Set(&memcache.Item{Key: "a b", Value: []byte("x")}), memcache.ErrMalformedKey)
	mustSet(t, mc, strings.Repeat("k", 250), "longest")
	wantValue(t, mc, strings.Repeat("k", 250), "longest")
}
