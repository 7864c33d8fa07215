package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// browser is one headless Chromium on the dashboard, recording what its
// pages write to the console.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string // the dashboard's URL
	dir  string // where screenshots go

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// startBrowser starts Debian's chromium, headless, with a fresh profile
// and the flags that keep it off the network (it would otherwise try to
// reach its update and sync services, which this machine refuses).
func startBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	require.NoError(t, err, "the dashboard is tested in headless Chromium: apt-get install chromium")
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	ctx, cancelCtx := chromedp.NewContext(alloc, chromedp.WithLogf(func(string, ...any) {}), chromedp.WithErrorf(func(string, ...any) {}))
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	dir := os.Getenv("SWITCHBOARD_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "build", "screenshots")
	}
	dir, err = filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b := &browser{t: t, ctx: ctx, base: base, dir: dir}
	msgs := chromedp.Console(ctx) // starts the browser and subscribes before any page loads
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancelTimeout(); <-done })
	return b
}

// takeConsole returns the console messages and forgets them.
func (b *browser) takeConsole() []chromedp.ConsoleMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.console
	b.console = nil
	return out
}

// noConsoleErrors fails when a page wrote an error or threw since the last look.
func (b *browser) noConsoleErrors(phase string) {
	b.t.Helper()
	for _, m := range b.takeConsole() {
		require.False(b.t, m.Type == chromedp.ConsoleError || m.IsException(), "%s: the page wrote %s (%s:%d)", phase, m, m.URL, m.Line)
	}
}

// expectConsole waits for the browser's report of a refused request
// (status, e.g. "401") and fails on any other message since the last look.
func (b *browser) expectConsole(phase, status string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, m := range b.console {
			if strings.Contains(m.Text, status) {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "%s: the browser reports the %s", phase, status)
	for _, m := range b.takeConsole() {
		require.Contains(b.t, m.Text, status, "%s: the page wrote %s", phase, m)
	}
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, actions...))
}

func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	require.NoError(b.t, err, js)
	return v
}

// open goes to the page of hash and waits until it has drawn its data.
func (b *browser) open(hash, page string) {
	b.t.Helper()
	eval[string](b, fmt.Sprintf(`document.getElementById("main").dataset.loaded = "false"; location.hash = %q`, hash))
	b.waitPage(page)
}

// waitPage waits until the page shown is page, loaded, and checks it shows
// no value the script failed to format.
func (b *browser) waitPage(page string) {
	b.t.Helper()
	b.do(chromedp.WaitReady(chromedp.CSS(fmt.Sprintf(`main[data-page=%q][data-loaded="true"]`, page))))
	text := b.text("main")
	for _, bad := range []string{"null", "undefined", "NaN", "[object"} {
		require.NotContains(b.t, text, bad, "the %s page", page)
	}
}

func (b *browser) count(css string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, css))
}

func (b *browser) text(css string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, css))
}

// drawn counts the pixels of a chart's canvas painted in a series' colour
// (app.js's palette): the data drawn, not only the axes.
func (b *browser) drawn(chart string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf(`(() => {
		const c = document.querySelector(%q + " canvas");
		if (!c || !c.width) return 0;
		const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		const palette = [[0x25,0x57,0xd6],[0xd6,0x59,0x2a],[0x2a,0x9d,0x5c],[0x9b,0x3f,0xc1],[0xc1,0x9b,0x1f],[0x1f,0xa3,0xc1]];
		let n = 0;
		for (let i = 0; i < d.length; i += 4) {
			if (d[i+3] < 200) continue;
			if (palette.some(([r,g,b]) => Math.abs(d[i]-r) < 12 && Math.abs(d[i+1]-g) < 12 && Math.abs(d[i+2]-b) < 12)) n++;
		}
		return n;
	})()`, chart))
}

// screenshot saves the page as name.png in the screenshots folder.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	p := filepath.Join(b.dir, name+".png")
	require.NoError(b.t, os.WriteFile(p, png, 0o644))
	b.t.Logf("screenshot of the %s page: %s", name, p)
}

// signIn types cred into the sign-in form and submits it.
func (b *browser) signIn(cred string) {
	b.t.Helper()
	b.do(chromedp.WaitVisible(chromedp.ID("credential")), chromedp.SendKeys(chromedp.ID("credential"), cred), chromedp.Click(chromedp.ID("signin-submit")))
}

func (b *browser) cookies() []*network.Cookie {
	b.t.Helper()
	r, err := chromedp.Run(b.ctx, func(ctx context.Context, t *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base}})
	})
	require.NoError(b.t, err)
	return r.Cookies
}

// TestDashboardInChromium: the decider's dashboard in headless Chromium on
// a running system, after chats through the edge: a wrong credential is
// refused; the tenant signs in with its API key and sees its own calls
// (the right rows, filtered and paged) and its spend drawn, and cannot
// open the operator's pages; the operator signs in with its token and sees
// each endpoint's figures, the first-token charts drawn and the choice per
// size bucket, and the limits. No page writes an error to the console.
// Each page's screenshot is saved ($SWITCHBOARD_SCREENSHOTS, else
// build/screenshots).
func TestDashboardInChromium(t *testing.T) {
	s := startStack(t, stackOptions{sim: simConfig, tune: func(c *deciderapp.Config) { c.AdminListen = "127.0.0.1:0" },
		catalog: billingCatalog(", limits: [{unit: requests, per: day, capacity: 1000}]")})
	for i := range 3 {
		a := s.chat(t, testKey, chatReq{content: fmt.Sprintf("dashboard call %d of acme", i), maxTokens: 4, stream: i == 1})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	}
	for i := range 2 {
		a := s.chat(t, otherKey, chatReq{content: fmt.Sprintf("dashboard call %d of globex", i), maxTokens: 4})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	}
	s.waitActivity(t, testKey, 3)
	s.waitActivity(t, otherKey, 2)
	// The calls' first-token times reach the statistics by the Report
	// stream, apart from their activity records: waited for, so the
	// operator's charts below have them to draw.
	require.Eventually(t, func() bool {
		for _, c := range s.explain(t, 100) {
			if c.Samples > 0 {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the calls' first-token times are in the statistics")

	base := "http://" + s.decider.DebugAddr() + "/dashboard/"
	b := startBrowser(t, base)
	b.do(chromedp.Navigate(base))
	b.waitPage("signin")
	b.noConsoleErrors("the sign-in page")
	b.screenshot("signin")

	// A wrong credential: refused with a message, no cookie, not echoed.
	b.signIn("sk-not-a-key-of-this-catalog")
	b.do(chromedp.WaitReady(chromedp.CSS(`#signin-error:not(:empty)`)))
	require.Contains(t, b.text("#signin-error"), "neither an operator token nor a tenant's API key")
	require.Empty(t, b.cookies(), "no session for a wrong credential")
	require.NotContains(t, eval[string](b, `document.documentElement.outerHTML`), "sk-not-a-key")
	b.expectConsole("a wrong credential", "401")

	// The tenant: its three calls, not globex's two.
	b.signIn(testKey)
	b.waitPage("calls")
	require.Equal(t, 3, b.count("#calls-table tbody tr"), "acme's calls, not globex's")
	require.Contains(t, b.text("#calls-table tbody"), "alpha")
	require.Contains(t, b.text("h2"), "acme")
	cookies := b.cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, cookies[0].SameSite)
	require.NotContains(t, cookies[0].Value, testKey)
	b.noConsoleErrors("the tenant's calls page")
	b.screenshot("tenant-calls")

	b.open("#calls?status=failed", "calls")
	require.Equal(t, 0, b.count("#calls-table tbody tr"), "no failed call")
	require.Equal(t, 1, b.count("#calls-empty"))
	b.open("#calls?limit=2", "calls")
	require.Equal(t, 2, b.count("#calls-table tbody tr"), "a page of two")
	b.do(chromedp.Click(chromedp.ID("page-next")))
	b.waitPage("calls")
	b.do(chromedp.WaitReady(chromedp.CSS(`#page-first`)))
	require.Equal(t, 1, b.count("#calls-table tbody tr"), "the third call on the next page")
	b.noConsoleErrors("the tenant's filtered and paged calls")

	b.open("#spend?hours=1", "spend")
	require.Positive(t, b.drawn("#spend-chart"), "the spend chart draws the calls' cost")
	require.Positive(t, b.drawn("#calls-chart"))
	require.NotEqual(t, "$0.0000", strings.TrimPrefix(b.text("#spend-total"), "total"))
	b.noConsoleErrors("the tenant's spend page")
	b.screenshot("tenant-spend")

	// The tenant cannot open an operator page, nor its JSON.
	b.open("#routing", "forbidden")
	require.Contains(t, b.text("#page-error"), "not for a tenant")
	require.Equal(t, 403, eval[int](b, `fetch("api/operator/overview").then(r => r.status)`))
	b.expectConsole("a tenant on an operator page", "403")

	// The operator.
	b.do(chromedp.Click(chromedp.ID("signout")))
	b.waitPage("signin")
	require.Empty(t, b.cookies(), "signed out")
	b.signIn(testOperatorToken)
	b.waitPage("routing")
	require.Equal(t, 3, b.count("#endpoints-table tbody tr"), "alpha, beta and gamma")
	require.Equal(t, 4, b.count("#ttft-charts canvas"), "a chart per size bucket")
	// Each chart is drawn once its figures are fetched: polled.
	require.Eventually(t, func() bool { return b.drawn("#ttft-0") > 0 }, 10*time.Second, 50*time.Millisecond,
		"the first-token times of prompts under 8k are drawn")
	require.Equal(t, 4, b.count("#choices-table tbody tr"), "a choice per size bucket")
	require.Contains(t, b.text("#choices-table tbody tr"), "/"+model, "the chosen endpoint is named")
	b.noConsoleErrors("the operator's routing page")
	b.screenshot("operator-routing")

	b.open("#limits", "limits")
	require.Equal(t, 4, b.count("#hedge-cards .card"))
	require.Equal(t, 1, b.count("#buckets-table tbody tr"), "acme's requests per day")
	row := b.text("#buckets-table tbody tr")
	require.Contains(t, row, "acme")
	require.Contains(t, row, "1,000", "its limit")
	require.Contains(t, row, "997", "what is left after its three calls")
	b.noConsoleErrors("the operator's limits page")
	b.screenshot("operator-limits")
}
