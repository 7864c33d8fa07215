package switchboardv1

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// EnumName is the one name of an enum value outside the API: the value's
// proto name without its enum's prefix, in lower case, so
// WORKLOAD_CLASS_BACKGROUND is "background", OUTCOME_RATE_LIMITED
// "rate_limited" and ROUTE_REASON_USER_SORT "user_sort"; a number the enum
// does not define is "". The prefix is the one of the enum's zero value
// (buf's lint rules name it <PREFIX>_UNSPECIFIED), so the zero value itself
// is "unspecified". Metrics labels, the catalog's and the HTTP API's class
// names and the decider's explanations all use it.
func EnumName(e protoreflect.Enum) string {
	return enumNamesOf(e.Descriptor())[e.Number()]
}

// enumNames caches each enum's names by number: EnumName runs on request
// paths and for every metric recorded.
var enumNames sync.Map // protoreflect.FullName → map[protoreflect.EnumNumber]string

func enumNamesOf(d protoreflect.EnumDescriptor) map[protoreflect.EnumNumber]string {
	if m, ok := enumNames.Load(d.FullName()); ok {
		return m.(map[protoreflect.EnumNumber]string)
	}
	vs := d.Values()
	prefix := ""
	if zero := vs.ByNumber(0); zero != nil {
		prefix = strings.TrimSuffix(string(zero.Name()), "UNSPECIFIED")
	}
	m := make(map[protoreflect.EnumNumber]string, vs.Len())
	for i := range vs.Len() {
		v := vs.Get(i)
		m[v.Number()] = strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix))
	}
	enumNames.Store(d.FullName(), m)
	return m
}
