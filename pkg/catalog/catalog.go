// Package catalog parses and validates the catalog users write: the models,
// the endpoints that serve them with their prices and quotas, and the tenants
// with their API keys and quotas. Prices are USD per million tokens.
package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
)

// Catalog is a parsed, validated catalog.
type Catalog struct {
	// Models are the models clients may ask for.
	Models []Model `yaml:"models"`
	// Tenants are the API keys and their quotas.
	Tenants []Tenant `yaml:"tenants"`
	// Partners are partner or reseller accounts whose tenants share limits. (Optional)
	Partners []Partner `yaml:"partners"`
	// Callers are the programs allowed to call the decider, each with its
	// role. (Optional) Without callers nobody but the health check reaches it.
	Callers []Caller `yaml:"callers"`
	// WorkloadClasses tune the workload classes' admission contracts, by
	// class name: interactive, background, partner or batch. (Optional) A
	// class or field left out keeps its default (DefaultContracts).
	WorkloadClasses map[string]WorkloadClass `yaml:"workload_classes"`
}

// Caller roles.
const (
	// RoleEdge is an edge: it decides for clients it authenticated by API
	// key, reports calls and spends the hedge budget.
	RoleEdge = "edge"
	// RoleService is a program that decides and reserves for its tenants.
	RoleService = "service"
	// RoleReplica is another decider replica forwarding to the broker's owner.
	RoleReplica = "replica"
	// RoleOperator reads: explains, lists models and reads activity.
	RoleOperator = "operator"
)

// Roles are the valid caller roles.
var Roles = []string{RoleEdge, RoleService, RoleReplica, RoleOperator}

// AllTenants in a caller's tenants lets it act for every tenant.
const AllTenants = "*"

// Caller is a program allowed to call the decider.
type Caller struct {
	// ID names the caller; a verified client certificate whose Subject
	// CommonName is ID authenticates as it. (Required)
	ID string `yaml:"id"`
	// Role is edge, service, replica or operator. (Required)
	Role string `yaml:"role"`
	// Tenants are the tenants a service may act for; ["*"] is every
	// tenant. (Required for role service, only for it)
	Tenants []string `yaml:"tenants"`
	// TokensSHA256 are the lowercase hex SHA-256 digests of the caller's
	// bearer tokens; the tokens themselves are never stored. Several allow
	// rotation without a gap. (Optional) A caller with none authenticates
	// by certificate only.
	TokensSHA256 []string `yaml:"tokens_sha256"`
	// SharedProviderState lets a service's reconciliations move what every
	// tenant sees of a provider: its route pauses and the limits its
	// headers teach. (Optional, only for role service) Defaults to false: a
	// service's provider failures pause the route for the reservation's
	// tenant only, and its headers' limits are not learned. An edge's
	// reports always move the shared state.
	SharedProviderState bool `yaml:"shared_provider_state"`
}

// Partner is a partner or reseller account.
type Partner struct {
	// ID names the partner; tenants name it in their partner field. (Required)
	ID string `yaml:"id"`
	// Limits are the partner's quotas, shared by all its tenants. (Optional)
	Limits []Limit `yaml:"limits"`
}

// Price is a price list in USD per million tokens.
type Price struct {
	// Input is the price of uncached input tokens. (Required)
	Input *float64 `yaml:"input"`
	// CachedInput is the price of input tokens read from cache. (Optional)
	// Defaults to Input: no cache discount.
	CachedInput *float64 `yaml:"cached_input"`
	// Output is the price of output tokens. (Required)
	Output *float64 `yaml:"output"`
	// CacheWrite is the price of input tokens written to the provider's
	// prompt cache for its default lifetime (Anthropic's 5 minutes).
	// (Optional) Defaults to Input.
	CacheWrite *float64 `yaml:"cache_write"`
	// CacheWrite1h is the price of input tokens written to the provider's
	// prompt cache for an hour. (Optional) Defaults to Input.
	CacheWrite1h *float64 `yaml:"cache_write_1h"`
}

// Rates is a Price with every field resolved: the price the one pricing
// formula (pricing.Cost) is applied to.
type Rates = pricing.Price

// Rates returns the price with defaults applied. Call it on validated prices only.
func (p Price) Rates() Rates {
	r := Rates{Input: deref(p.Input), Output: deref(p.Output)}
	r.CachedInput, r.CacheWrite, r.CacheWrite1h = r.Input, r.Input, r.Input
	if p.CachedInput != nil {
		r.CachedInput = *p.CachedInput
	}
	if p.CacheWrite != nil {
		r.CacheWrite = *p.CacheWrite
	}
	if p.CacheWrite1h != nil {
		r.CacheWrite1h = *p.CacheWrite1h
	}
	return r
}

// Model is one model and the endpoints that sell it.
type Model struct {
	// ID is what clients send as "model", e.g. deepseek/deepseek-v4.1-flash. (Required)
	ID string `yaml:"id"`
	// Aliases are other names clients may send for the model, such as the
	// names coding agents ask for by default: exact names
	// ("claude-sonnet-4-5") and prefix patterns ending in '*'
	// ("claude-sonnet-4-5*" is that name and every name it starts). A
	// request for an alias is served, limited, billed and recorded as one
	// for the model's id (see Resolver). (Optional)
	Aliases []string `yaml:"aliases"`
	// ListPrice is the model maker's official price. (Optional)
	ListPrice *Price `yaml:"list_price"`
	// Endpoints are the providers' offers. (Required, at least one)
	Endpoints []Endpoint `yaml:"endpoints"`
	// Routing tunes how the decider ranks the endpoints. (Optional)
	Routing *ModelRouting `yaml:"routing"`
	// Fallback is what the model's workload tolerates when a request moves
	// to another endpoint. (Optional) Defaults to moving freely.
	Fallback *Fallback `yaml:"fallback"`
}

// Endpoint is one provider's offer of a model.
type Endpoint struct {
	// Provider is the provider's name as clients use it in provider.only,
	// order and ignore: lowercase letters, digits, '-' and '_'. (Required)
	Provider string `yaml:"provider"`
	// BaseURL is the upstream's API root, e.g. https://api.example.com/v1:
	// the edge posts to BaseURL + "/chat/completions" for API openai and
	// BaseURL + "/messages" for API anthropic. (Required)
	BaseURL string `yaml:"base_url"`
	// API is the HTTP API the upstream speaks: APIOpenAI (chat
	// completions) or APIAnthropic (Anthropic's Messages API). (Optional)
	// Defaults to APIOpenAI.
	API string `yaml:"api"`
	// UpstreamModel is the model name sent upstream. (Optional) Defaults to the model's ID.
	UpstreamModel string `yaml:"upstream_model"`
	// APIKeyEnv names the credential on the edge: an environment variable or
	// a file of the edge's provider key directory. It must start with
	// ProviderKeyPrefix, so a catalog can never make an edge send anything
	// else it holds (its cloud credentials, its own tokens) to a base_url.
	// (Optional) Empty means the upstream needs no credential.
	APIKeyEnv string `yaml:"api_key_env"`
	// Price is what this endpoint charges. (Required)
	Price Price `yaml:"price"`
	// ContextLength is the largest prompt plus output, in tokens. (Optional) 0 means unknown.
	ContextLength int64 `yaml:"context_length"`
	// MaxOutputTokens is the largest output the endpoint produces. (Optional)
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// Quantization is the served precision, e.g. fp8. (Optional)
	Quantization string `yaml:"quantization"`
	// DataCollection is "allow" when the provider may keep or train on prompts,
	// "deny" otherwise. (Optional) Defaults to "allow".
	DataCollection string `yaml:"data_collection"`
	// ZDR marks a zero-data-retention endpoint. (Optional)
	ZDR bool `yaml:"zdr"`
	// SupportedParameters lists the optional request parameters the endpoint
	// honours (tools, response_format...), for require_parameters. (Optional)
	SupportedParameters []string `yaml:"supported_parameters"`
	// Limits is the provider's quota on this endpoint. (Optional)
	Limits []Limit `yaml:"limits"`
	// ProviderProject names the provider project (or organisation) whose
	// provider_project limits this endpoint shares. (Optional) Defaults to
	// the provider name: every endpoint of a provider shares one project.
	ProviderProject string `yaml:"provider_project"`
	// ProviderWorkspace names the workspace whose provider_workspace limits
	// this endpoint shares. (Optional) Defaults to the provider name.
	ProviderWorkspace string `yaml:"provider_workspace"`
	// Region is where the endpoint serves, for the model's fallback
	// residency (fallback.same_region, fallback.regions). (Optional)
	Region string `yaml:"region"`
}

// Endpoint APIs.
const (
	// APIOpenAI is an OpenAI-compatible chat-completions upstream.
	APIOpenAI = "openai"
	// APIAnthropic is an Anthropic-compatible Messages API upstream.
	APIAnthropic = "anthropic"
)

// APIs are the valid endpoint APIs.
var APIs = []string{APIOpenAI, APIAnthropic}

// ID returns the endpoint's stable id, "<provider>/<model id>".
func (e Endpoint) ID(modelID string) string { return e.Provider + "/" + modelID }

// Tenant is a team or customer with its API keys and quotas.
type Tenant struct {
	// ID names the tenant. (Required)
	ID string `yaml:"id"`
	// APIKeysSHA256 are the lowercase hex SHA-256 digests of the tenant's API
	// keys; the keys themselves are never stored. (Required, at least one
	// here or in APIKeys) Once parsed it also holds the digests of APIKeys,
	// so it lists every key of the tenant.
	APIKeysSHA256 []string `yaml:"api_keys_sha256"`
	// APIKeys are keys given with a workload class of their own, e.g. the
	// key of a nightly job admitted as batch. (Optional)
	APIKeys []APIKey `yaml:"api_keys"`
	// Weight is the tenant's share of contended capacity relative to the
	// other tenants. (Optional) Defaults to 1.
	Weight *float64 `yaml:"weight"`
	// Burst bounds how many requests ahead of its fair share the tenant may
	// run while others wait. (Optional) Defaults to the broker's default.
	Burst float64 `yaml:"burst"`
	// DefaultClass is the workload class of the tenant's requests that ask
	// for none and whose key has none. (Optional) Defaults to interactive.
	DefaultClass string `yaml:"default_class"`
	// Classes are the workload classes the tenant's requests may be
	// admitted as; asking for another is refused. (Optional) Defaults to
	// every class but partner, and every class for a tenant with a partner.
	Classes []string `yaml:"classes"`
	// Limits are the tenant's quotas. (Optional)
	Limits []Limit `yaml:"limits"`
	// Partner names the partner account the tenant belongs to, whose limits
	// it shares. (Optional)
	Partner string `yaml:"partner"`
	// Routing is the tenant's default routing settings. (Optional)
	Routing *TenantRouting `yaml:"routing"`
}

// Limit is one quota: {unit, per, capacity}.
type Limit struct {
	// Unit is what is counted: requests, input_tokens, output_tokens,
	// total_tokens, usd or concurrent_requests. (Required)
	Unit string `yaml:"unit"`
	// Per is the window: second, minute, hour or day; empty for
	// concurrent_requests and only for it. (Required otherwise)
	Per string `yaml:"per"`
	// Capacity is how much fits in one window. (Required, > 0)
	Capacity float64 `yaml:"capacity"`
	// Burst is extra capacity above the steady rate. (Optional) Defaults to 0.
	Burst float64 `yaml:"burst"`
	// Scope is the level of the hierarchy the limit applies to. (Optional)
	// Defaults to tenant on tenants, model_route on endpoints and partner on
	// partners. On a tenant, api_key gives each of its keys its own bucket
	// and app a bucket per application (see ScopeKey).
	Scope string `yaml:"scope"`
	// ScopeKey names the instance of an app scope: "<app>" for every
	// environment of the app or "<app>/<environment>" for one. (Required for
	// scope app)
	ScopeKey string `yaml:"scope_key"`
	// ResetAt is the UTC time of day, "HH:MM", at which a per: day limit
	// resets, for providers whose day does not start at midnight UTC.
	// (Optional) Defaults to "00:00".
	ResetAt string `yaml:"reset_at"`
	// Ramp caps how fast admissions may grow from one period to the next. (Optional)
	Ramp *Ramp `yaml:"ramp"`
	// RefundOnExpiry gives a reservation that expired unreconciled its
	// tokens, requests and spend back to this limit. (Optional) Defaults to
	// false: the edge that held it may have died after sending the call, so
	// its estimate stays consumed (never over-admitting); true suits a
	// limit where refusing is dearer than a possible overrun, e.g. a
	// tenant's own daily budget. Requests in flight are always released.
	RefundOnExpiry *bool `yaml:"refund_on_expiry"`
}

// Ramp is a ramp limit: a period may admit at most
// max(floor, (1 + max_increase) × what the previous period admitted).
type Ramp struct {
	// MaxIncrease is the largest growth per period as a fraction, 0.5 = +50%. (Required, > 0)
	MaxIncrease float64 `yaml:"max_increase"`
	// Floor is what a period may always admit. (Optional) Defaults to a tenth of the capacity.
	Floor float64 `yaml:"floor"`
	// Period is the ramp's period, e.g. "1m". (Optional) Defaults to one minute.
	Period string `yaml:"period"`
}

// Units are the valid limit units.
var Units = []string{"requests", "input_tokens", "output_tokens", "total_tokens", "usd", "concurrent_requests"}

// Windows are the valid limit windows.
var Windows = []string{"second", "minute", "hour", "day"}

// Scopes are the valid limit scopes, narrowest first.
var Scopes = []string{"api_key", "app", "tenant", "partner", "provider_workspace", "provider_project", "model_route"}

// ProviderKeyPrefix starts the name of every provider credential
// (api_key_env): edges read only variables and files named so.
const ProviderKeyPrefix = "SWITCHBOARD_PROVIDER_KEY_"

var providerKeyName = regexp.MustCompile(`^` + ProviderKeyPrefix + `[A-Z0-9_]+$`)

// ValidProviderKeyName reports whether name may name a provider credential:
// ProviderKeyPrefix followed by one or more of A-Z, 0-9 and _.
func ValidProviderKeyName(name string) bool { return providerKeyName.MatchString(name) }

var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// HashKey returns the lowercase hex SHA-256 of an API key, as stored in api_keys_sha256.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// KeyPrefix returns the first 64 bits of an API key's SHA-256, given as
// the lowercase hex digest HashKey returns: what edges are told of the valid
// keys, enough to refuse an unknown key, far too little to forge one.
func KeyPrefix(keySHA256 string) (uint64, error) {
	if len(keySHA256) < 16 {
		return 0, fmt.Errorf("key digest too short")
	}
	return strconv.ParseUint(keySHA256[:16], 16, 64)
}

// KeyID returns a stable, non-secret id for an API key hash: "key-" and its first 12 hex digits.
func KeyID(keySHA256 string) string {
	if len(keySHA256) < 12 {
		return "key-" + keySHA256
	}
	return "key-" + keySHA256[:12]
}

// Load reads and validates the catalog at path.
func Load(path string) (*Catalog, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	return c, nil
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func validURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https")
	}
	if u.Host == "" {
		return fmt.Errorf("missing host")
	}
	if u.User != nil {
		return fmt.Errorf("must not carry credentials: use api_key_env")
	}
	return nil
}

func oneOf(v string, set []string) bool { return slices.Contains(set, v) }

func list(set []string) string { return strings.Join(set, ", ") }
