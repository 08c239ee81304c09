package console

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/processor"
)

// maxShown bounds the DLQ records one page lists; maxSelected the records
// one replay from the page may select.
const (
	maxShown    = 500
	maxSelected = 500
)

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	m.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)))
	m.HandleFunc("GET "+Prefix+"/{$}", c.overview)
	m.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
	})
	m.HandleFunc("GET "+Prefix+"/groups/{group}", c.groupPage)
	m.HandleFunc("POST "+Prefix+"/groups/{group}/reset", c.act(c.reset))
	m.HandleFunc("GET "+Prefix+"/topics/{topic}", c.topicPage)
	m.HandleFunc("GET "+Prefix+"/dlq/{group}", c.dlqPage)
	m.HandleFunc("GET "+Prefix+"/dlq/{group}/{partition}/{offset}", c.recordPage)
	m.HandleFunc("POST "+Prefix+"/dlq/{group}/replay", c.act(c.replay))
	m.HandleFunc("POST "+Prefix+"/dlq/{group}/purge", c.act(c.purge))
	m.HandleFunc("GET "+Prefix+"/orders", c.orderPage)
	m.HandleFunc("POST "+Prefix+"/login", c.login)
	m.HandleFunc("POST "+Prefix+"/logout", c.act(c.logout))
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no console page at %s", r.URL.Path))
	})
	c.mux = m
}

// act wraps an action: it needs an operator session, its CSRF token and a
// same-origin request (auth.action).
func (c *Console) act(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if status := c.auth.action(r); status != 0 {
			c.fail(w, r, status, errForbidden)
			return
		}
		h(w, r)
	}
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if !c.auth.enabled() {
		c.fail(w, r, http.StatusForbidden, errors.New("the console is read-only: no operator token is configured (--console-token or "+EnvToken+")"))
		return
	}
	if !sameOrigin(r) {
		c.fail(w, r, http.StatusForbidden, errors.New("a login from another site is refused"))
		return
	}
	if !c.auth.checkToken(r.PostFormValue("token")) {
		c.cfg.Logger.Warn("console: login refused", "remote", r.RemoteAddr)
		c.fail(w, r, http.StatusForbidden, errors.New("wrong operator token"))
		return
	}
	setSession(w, r, c.auth.newSession(time.Now()))
	c.cfg.Logger.Info("console: operator logged in", "remote", r.RemoteAddr)
	http.Redirect(w, r, localPath(r.PostFormValue("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	setSession(w, r, "")
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

// localPath returns p when it is a console path, else the overview: a
// redirect never leaves the console.
func localPath(p string) string {
	if strings.HasPrefix(p, Prefix+"/") && !strings.HasPrefix(p, "//") && !strings.ContainsAny(p, "\\\r\n") {
		return p
	}
	return Prefix + "/"
}

// groupRow is one group in the overview.
type groupRow struct {
	ops.GroupInfo
	DLQ *dlqCount
}

type dlqCount struct {
	Selected, Replayed int
	Error              string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	data := map[string]any{"Title": "Overview"}
	var errs []string
	topics, err := ops.ListTopics(ctx, c.adm, false)
	if err != nil {
		errs = append(errs, "topics: "+err.Error())
	}
	data["Topics"] = topics
	gs, err := ops.DescribeGroups(ctx, c.adm)
	if err != nil {
		errs = append(errs, "groups: "+err.Error())
	} else {
		c.record(time.Now(), gs)
	}
	rows := make([]groupRow, 0, len(gs))
	for _, g := range gs {
		row := groupRow{GroupInfo: g}
		if slices.Contains(c.cfg.Groups, g.Group) {
			row.DLQ = c.dlqCount(ctx, g.Group)
		}
		rows = append(rows, row)
	}
	data["Groups"] = rows
	data["Chart"] = lagChart(c.ring(), c.cfg.SampleEvery)
	data["Health"] = c.health(ctx, gs)
	data["Errors"] = errs
	c.render(w, r, http.StatusOK, "overview", data)
}

func (c *Console) dlqCount(ctx context.Context, group string) *dlqCount {
	d, err := c.dlq(group)
	if err != nil {
		return &dlqCount{Error: err.Error()}
	}
	l, err := d.List(ctx, ops.Selection{}, 1)
	if err != nil {
		if errors.Is(err, ops.ErrNoTopic) {
			return nil
		}
		return &dlqCount{Error: err.Error()}
	}
	return &dlqCount{Selected: l.Selected, Replayed: l.Replayed}
}

// health is Config.Health's answer, or one line per known group: ready when
// it has members and is Stable.
func (c *Console) health(ctx context.Context, gs []ops.GroupInfo) []ServiceHealth {
	if c.cfg.Health != nil {
		return c.cfg.Health(ctx)
	}
	var out []ServiceHealth
	for _, name := range c.cfg.Groups {
		h := ServiceHealth{Name: name, Detail: "no such group"}
		for _, g := range gs {
			if g.Group == name {
				h.Ready = len(g.Members) > 0 && g.State == "Stable"
				h.Detail = fmt.Sprintf("state %s, %d members, lag %d", orDash(g.State), len(g.Members), g.TotalLag)
			}
		}
		out = append(out, h)
	}
	return out
}

func (c *Console) groupPage(w http.ResponseWriter, r *http.Request) {
	c.renderGroup(w, r, http.StatusOK, nil, nil)
}

// renderGroup renders the group page, with the result of a reset when one
// was asked for.
func (c *Console) renderGroup(w http.ResponseWriter, r *http.Request, status int, res *ops.ResetResult, actErr error) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	name := r.PathValue("group")
	gs, err := ops.DescribeGroups(ctx, c.adm, name)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	g := gs[0]
	topics := map[string]bool{}
	for _, p := range g.Partitions {
		topics[p.Topic] = true
	}
	data := map[string]any{"Title": "Group " + name, "Group": g, "Topics": sortedKeys(topics), "Reset": res, "HasDLQ": slices.Contains(c.cfg.Groups, name),
		"ResetTos": []string{ops.ResetEarliest, ops.ResetLatest, ops.ResetTime, ops.ResetOffset}}
	if actErr != nil {
		data["ActionError"] = actErr.Error()
	}
	c.render(w, r, status, "group", data)
}

func (c *Console) reset(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	o := ops.ResetOptions{Topic: r.PostFormValue("topic"), To: r.PostFormValue("to"), DryRun: r.PostFormValue("action") != "apply"}
	var perr error
	if p := r.PostFormValue("partition"); p != "" && p != "all" {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || n < 0 {
			perr = fmt.Errorf("partition %q: want a number >= 0 or all", p)
		}
		o.Partitions = []int32{int32(n)}
	}
	switch o.To {
	case ops.ResetTime:
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(r.PostFormValue("time")))
		if err != nil {
			perr = fmt.Errorf("time %q: want RFC 3339, such as 2026-05-01T12:00:00Z", r.PostFormValue("time"))
		}
		o.Time = t
	case ops.ResetOffset:
		n, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue("offset")), 10, 64)
		if err != nil {
			perr = fmt.Errorf("offset %q: want a whole number >= 0", r.PostFormValue("offset"))
		}
		o.Offset = n
	}
	if perr != nil {
		c.renderGroup(w, r, http.StatusBadRequest, nil, perr)
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	res, err := ops.ResetOffsets(ctx, c.adm, group, o)
	if err != nil {
		c.renderGroup(w, r, http.StatusConflict, nil, err)
		return
	}
	if !o.DryRun {
		c.cfg.Logger.Warn("console: offsets reset", "group", group, "topic", o.Topic, "partitions", o.Partitions, "to", o.To,
			"skipped", res.Skipped, "again", res.Again, "remote", r.RemoteAddr)
	}
	c.renderGroup(w, r, http.StatusOK, res, nil)
}

// topicGroup is one group reading a topic, with its partitions of it.
type topicGroup struct {
	Group      string
	State      string
	Members    int
	Lag        int64
	Partitions []ops.PartitionLag
}

type topicPartition struct {
	Partition  int32
	Start, End int64
}

func (c *Console) topicPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	name := r.PathValue("topic")
	all, err := ops.ListTopics(ctx, c.adm, true)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	i := slices.IndexFunc(all, func(t ops.TopicInfo) bool { return t.Topic == name })
	if i < 0 {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("topic %s: %w", name, ops.ErrNoTopic))
		return
	}
	starts, _ := c.adm.ListStartOffsets(ctx, name)
	ends, err := c.adm.ListEndOffsets(ctx, name)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	var parts []topicPartition
	for p, e := range ends[name] {
		tp := topicPartition{Partition: p, Start: -1, End: e.Offset}
		if s, ok := starts.Lookup(name, p); ok && s.Err == nil {
			tp.Start = s.Offset
		}
		parts = append(parts, tp)
	}
	slices.SortFunc(parts, func(a, b topicPartition) int { return int(a.Partition - b.Partition) })
	gs, err := ops.DescribeGroups(ctx, c.adm)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	var readers []topicGroup
	for _, g := range gs {
		tg := topicGroup{Group: g.Group, State: g.State, Members: len(g.Members)}
		for _, p := range g.Partitions {
			if p.Topic == name {
				tg.Partitions = append(tg.Partitions, p)
				tg.Lag += max(p.Lag, 0)
			}
		}
		if len(tg.Partitions) > 0 {
			readers = append(readers, tg)
		}
	}
	c.render(w, r, http.StatusOK, "topic", map[string]any{"Title": "Topic " + name, "Topic": all[i], "Partitions": parts, "Readers": readers})
}

func (c *Console) dlqPage(w http.ResponseWriter, r *http.Request) {
	c.renderDLQ(w, r, http.StatusOK, nil)
}

// renderDLQ renders a group's DLQ page, with the result of an action.
func (c *Console) renderDLQ(w http.ResponseWriter, r *http.Request, status int, result map[string]any) {
	group := r.PathValue("group")
	if !slices.Contains(c.cfg.Groups, group) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no DLQ for group %q: the console shows those of %s", group, strings.Join(c.cfg.Groups, ", ")))
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	d, err := c.dlq(group)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	q := r.URL.Query()
	sel := ops.Selection{}
	class, topic := q.Get("class"), q.Get("topic")
	if class != "" {
		sel.Classes = []string{class}
	}
	l, err := d.List(ctx, sel, 0)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	var shown []ops.DLQRecord
	truncated := false
	for _, rec := range l.Records {
		if topic != "" && rec.OriginalTopic != topic {
			continue
		}
		if len(shown) == maxShown {
			truncated = true
			break
		}
		shown = append(shown, rec)
	}
	data := map[string]any{"Title": "DLQ " + d.Topic(), "Group": group, "DLQTopic": d.Topic(), "Listing": l, "Records": shown, "Truncated": truncated,
		"Class": class, "OrigTopic": topic, "HasRetry": group != order.GroupFulfillment, "Rate": c.cfg.ReplayRate}
	for k, v := range result {
		data[k] = v
	}
	c.render(w, r, status, "dlq", data)
}

func (c *Console) recordPage(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if !slices.Contains(c.cfg.Groups, group) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no DLQ for group %q", group))
		return
	}
	p, perr := strconv.ParseInt(r.PathValue("partition"), 10, 32)
	o, oerr := strconv.ParseInt(r.PathValue("offset"), 10, 64)
	if perr != nil || oerr != nil || p < 0 || o < 0 {
		c.fail(w, r, http.StatusBadRequest, errors.New("want /console/dlq/GROUP/PARTITION/OFFSET with whole numbers"))
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	d, err := c.dlq(group)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	rec, err := d.Show(ctx, int32(p), o)
	if errors.Is(err, ops.ErrNoRecord) {
		c.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	rec.Payload = ops.DecodePayload(ctx, c.cfg.Registry, c.cfg.Serde, rec.OriginalTopic, rec.Value)
	c.render(w, r, http.StatusOK, "record", map[string]any{"Title": "Record " + rec.ID, "Group": group, "Record": rec, "HasRetry": group != order.GroupFulfillment})
}

func (c *Console) replay(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if !slices.Contains(c.cfg.Groups, group) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no DLQ for group %q", group))
		return
	}
	ids := r.PostForm["id"]
	if len(ids) == 0 {
		c.renderDLQ(w, r, http.StatusBadRequest, map[string]any{"ActionError": "no record selected: tick the records to replay"})
		return
	}
	if len(ids) > maxSelected {
		c.renderDLQ(w, r, http.StatusBadRequest, map[string]any{"ActionError": fmt.Sprintf("%d records selected: at most %d per replay from the console (`ordercast dlq replay` has no such cap)", len(ids), maxSelected)})
		return
	}
	sel := ops.Selection{IDs: ids}
	for _, id := range ids {
		co, err := ops.ParseCoord(id)
		if err != nil || co.Topic != processor.DLQTopic(group) {
			c.renderDLQ(w, r, http.StatusBadRequest, map[string]any{"ActionError": fmt.Sprintf("record %q is not a record of %s", id, processor.DLQTopic(group))})
			return
		}
		if !slices.Contains(sel.Partitions, co.Partition) {
			sel.Partitions = append(sel.Partitions, co.Partition)
		}
	}
	to := ops.Target(r.PostFormValue("to"))
	o := ops.ReplayOptions{Selection: sel, To: to, Rate: c.cfg.ReplayRate, Force: r.PostFormValue("force") == "1", DryRun: r.PostFormValue("action") != "apply"}
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.Timeout+time.Duration(float64(len(ids))/o.Rate*float64(time.Second)))
	defer cancel()
	d, err := c.dlq(group)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	res, err := d.Replay(ctx, o)
	var refused *ops.RefusedError
	data := map[string]any{"Replay": res}
	if err != nil && !errors.As(err, &refused) {
		data["ActionError"] = err.Error()
	}
	if res != nil && !o.DryRun {
		c.cfg.Logger.Warn("console: DLQ records replayed", "group", group, "replayed", len(res.Replayed), "refused", len(res.Refused), "to", res.Target, "remote", r.RemoteAddr)
	}
	c.renderDLQ(w, r, http.StatusOK, data)
}

func (c *Console) purge(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if !slices.Contains(c.cfg.Groups, group) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no DLQ for group %q", group))
		return
	}
	o := ops.PurgeOptions{DryRun: r.PostFormValue("action") != "apply"}
	ctx, cancel := c.ctx(r)
	defer cancel()
	d, err := c.dlq(group)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	res, err := d.Purge(ctx, o)
	data := map[string]any{"Purge": res}
	if err != nil {
		data["ActionError"] = err.Error()
	}
	if res != nil && !o.DryRun {
		c.cfg.Logger.Warn("console: DLQ purged", "group", group, "partitions", len(res.Partitions), "remote", r.RemoteAddr)
	}
	c.renderDLQ(w, r, http.StatusOK, data)
}

// orderEvent is one record of an order, decoded.
type orderEvent struct {
	ops.FoundRecord
	Payload *ops.Payload
}

// orderWindow is how many of the last offsets of each partition the order
// page searches.
const orderWindow = 20000

func (c *Console) orderPage(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	data := map[string]any{"Title": "Order", "ID": id}
	if id == "" {
		c.render(w, r, http.StatusOK, "order", data)
		return
	}
	if len(id) > 128 {
		c.fail(w, r, http.StatusBadRequest, errors.New("order id longer than 128 bytes"))
		return
	}
	data["Title"] = "Order " + id
	ctx, cancel := c.ctx(r)
	defer cancel()
	if c.cfg.Order != nil {
		v, err := c.cfg.Order(ctx, id)
		switch {
		case errors.Is(err, checkout.ErrOrderNotFound):
			data["NotStored"] = true
		case err != nil:
			data["ViewError"] = err.Error()
		default:
			data["View"] = v
		}
	}
	topics := []string{order.TopicOrderCreated, order.TopicPaymentProcessed, order.TopicShipmentRequested}
	for _, g := range c.cfg.Groups {
		topics = append(topics, processor.DLQTopic(g))
	}
	found, err := ops.FindRecords(ctx, c.cfg.Kafka, topics, []byte(id), orderWindow)
	if err != nil {
		data["FindError"] = err.Error()
	} else {
		byTopic := map[string][]orderEvent{}
		for _, fr := range found.Records {
			src := fr.Topic
			for _, h := range fr.Headers {
				if h.Key == processor.HeaderOriginalTopic {
					src = h.Value
				}
			}
			byTopic[fr.Topic] = append(byTopic[fr.Topic], orderEvent{FoundRecord: fr, Payload: ops.DecodePayload(ctx, c.cfg.Registry, c.cfg.Serde, src, fr.Value)})
		}
		type topicEvents struct {
			Topic  string
			Events []orderEvent
		}
		var out []topicEvents
		for _, t := range topics {
			if len(byTopic[t]) > 0 || !strings.HasSuffix(t, ".dlq") {
				out = append(out, topicEvents{Topic: t, Events: byTopic[t]})
			}
		}
		data["Events"] = out
		data["Found"] = found
		data["Shipped"] = len(byTopic[order.TopicShipmentRequested]) > 0
	}
	c.render(w, r, http.StatusOK, "order", data)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
