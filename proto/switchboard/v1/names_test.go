package switchboardv1

import "testing"

func TestEnumName(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{EnumName(WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED), "unspecified"},
		{EnumName(WorkloadClass_WORKLOAD_CLASS_BACKGROUND), "background"},
		{EnumName(Outcome_OUTCOME_RATE_LIMITED), "rate_limited"},
		{EnumName(Outcome_OUTCOME_CLIENT_ERROR), "client_error"},
		{EnumName(RouteReason_ROUTE_REASON_USER_SORT), "user_sort"},
		{EnumName(LimitScope_LIMIT_SCOPE_PROVIDER_PROJECT), "provider_project"},
		{EnumName(SizeBucket_SIZE_BUCKET_8K_TO_32K), "8k_to_32k"},
		{EnumName(WorkloadClass(99)), ""},
	} {
		if tt.got != tt.want {
			t.Errorf("EnumName = %q, want %q", tt.got, tt.want)
		}
	}
}
