package auth

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

const (
	interactive = switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE
	background  = switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND
	partner     = switchboardv1.WorkloadClass_WORKLOAD_CLASS_PARTNER
	batch       = switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH
	unspecified = switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED
)

// TestResolveClass checks the workload class a request is admitted as:
// the one it asks for if its tenant may use it, else its key's, else its
// tenant's default, else interactive.
func TestResolveClass(t *testing.T) {
	plain, nightly, other, resold := catalog.HashKey("plain"), catalog.HashKey("nightly"), catalog.HashKey("other"), catalog.HashKey("resold")
	c, err := catalog.Parse([]byte(`models:
  - id: m
    endpoints: [{provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]
workload_classes:
  background: {max_wait: 5m}
partners: [{id: resellers}]
tenants:
  - id: acme
    api_keys_sha256: [` + plain + `]
    api_keys: [{sha256: ` + nightly + `, class: batch}]
  - id: globex
    api_keys_sha256: [` + other + `]
    classes: [background, batch]
    default_class: background
  - id: initech
    partner: resellers
    api_keys_sha256: [` + resold + `]
`))
	require.NoError(t, err)
	var cur atomic.Pointer[Index]
	a := New(reads(cur.Load))
	cur.Store(NewIndex(c))
	tests := []struct {
		name  string
		id    *switchboardv1.Identity
		want  switchboardv1.WorkloadClass
		code  codes.Code
		error string
	}{
		{name: "none asked: interactive", id: &switchboardv1.Identity{ApiKeySha256: plain}, want: interactive},
		{name: "asked and allowed", id: &switchboardv1.Identity{ApiKeySha256: plain, WorkloadClass: background}, want: background},
		{name: "the key's class", id: &switchboardv1.Identity{ApiKeySha256: nightly}, want: batch},
		{name: "asked wins over the key's", id: &switchboardv1.Identity{ApiKeySha256: nightly, WorkloadClass: interactive}, want: interactive},
		{name: "partner without a partner", id: &switchboardv1.Identity{ApiKeySha256: plain, WorkloadClass: partner},
			code: codes.PermissionDenied, error: "workload class partner is not allowed for this tenant; it may use interactive, background, batch"},
		{name: "tenant default", id: &switchboardv1.Identity{ApiKeySha256: other}, want: background},
		{name: "tenant default by tenant id", id: &switchboardv1.Identity{TenantId: "globex"}, want: background},
		{name: "a class the tenant may not use", id: &switchboardv1.Identity{TenantId: "globex", WorkloadClass: interactive},
			code: codes.PermissionDenied, error: "it may use background, batch"},
		{name: "a partner's tenant", id: &switchboardv1.Identity{ApiKeySha256: resold, WorkloadClass: partner}, want: partner},
		{name: "unknown class", id: &switchboardv1.Identity{ApiKeySha256: plain, WorkloadClass: 42}, code: codes.InvalidArgument, error: "unknown workload_class 42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := cur.Load().Resolve(tt.id)
			if tt.code != codes.OK {
				require.Equal(t, tt.code, status.Code(err), "%v", err)
				require.ErrorContains(t, err, tt.error)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, id.GetWorkloadClass())
			again, err := cur.Load().Resolve(id)
			require.NoError(t, err, "a resolved identity resolves again to itself, as the broker's owner does with a forwarded one")
			require.Equal(t, tt.want, again.GetWorkloadClass())
		})
	}

	k, ok := a.Contract(background)
	require.True(t, ok)
	require.Equal(t, 5*time.Minute, k.MaxWait)
	k, ok = a.Contract(unspecified)
	require.True(t, ok)
	require.Equal(t, catalog.ClassInteractive, k.Class)
	_, ok = a.Contract(42)
	require.False(t, ok)
}

func TestClassNames(t *testing.T) {
	for _, name := range catalog.Classes {
		require.Equal(t, name, ClassName(ClassOf(name)))
	}
	require.Equal(t, unspecified, ClassOf("urgent"))
	require.Equal(t, "interactive", ClassName(unspecified))
}
