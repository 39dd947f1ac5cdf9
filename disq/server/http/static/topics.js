// Topics, as the dashboard shows them (a disq extension: TOPIC SUBSCRIBE / UNSUBSCRIBE /
// LIST / PUBLISH over /api/v1/topics): each topic the user may see and its subscribed
// queues (each a link to the queue's page, with an Unsubscribe button), a form to
// subscribe a queue, and one to publish a message (one job in every subscribed queue;
// the answer lists each queue's job). Values from the server go into markup through
// esc() only, into links through enc().

import { $, count, enc, esc, num } from "./format.js";
import { reloader } from "./ends.js";

function topicRow(topic, queues, filters) {
  const cells = queues.map((queue) => `<span class="subscription">
      <a href="#/queue/${enc(queue)}"><code>${esc(queue)}</code></a>
      ${filters[queue] ? `<span class="muted filter">where ${esc(filters[queue])}</span>` : ""}
      <button type="button" class="small ghost" data-action="unsubscribe" data-topic="${esc(topic)}"
        data-queue="${esc(queue)}">Unsubscribe</button></span>`).join(" ");
  return `<tr data-topic="${esc(topic)}"><td><code>${esc(topic)}</code></td>
    <td class="num">${count(queues.length, "queue")}</td>
    <td class="queues">${cells}</td></tr>`;
}

export function topicsPage(root, { api, toast }) {
  root.innerHTML = `
    <div class="page-head"><h1>Topics</h1>
      <div class="tools"><button type="button" class="small ghost" data-action="refresh-jobs">Refresh</button></div></div>
    <section class="panel">
      <p class="muted">Each publish to a topic adds one job to every queue subscribed to it (each queue is a
        consumer group, with its own retries and dead letters). Every node holds every subscription.</p>
      <table class="grid" id="topics"><thead><tr><th>Topic</th><th class="num">Subscribed</th><th>Queues</th></tr></thead>
        <tbody></tbody></table>
    </section>
    <section class="panel">
      <h2>Subscribe a queue</h2>
      <form id="subscribe-form" class="inline-form">
        <label>Topic <input name="topic" required maxlength="256" autocomplete="off"></label>
        <label>Queue <input name="queue" required maxlength="1024" autocomplete="off"></label>
        <button type="submit" class="small">Subscribe</button>
      </form>
    </section>
    <section class="panel">
      <h2>Publish</h2>
      <form id="publish-form" class="inline-form">
        <label>Topic <input name="topic" required maxlength="256" autocomplete="off"></label>
        <label>Body <input name="body" autocomplete="off"></label>
        <label>Message ID <input name="msgid" maxlength="256" autocomplete="off"
          title="a publish sent again with the same ID adds nothing twice"></label>
        <button type="submit" class="small">Publish</button>
      </form>
      <ul id="published" class="plain"></ul>
    </section>`;
  const load = reloader(toast, "list the topics", async () => {
    const { topics, filters = {} } = await api("GET", "/api/v1/topics");
    const names = Object.keys(topics).sort();
    $("#topics tbody", root).innerHTML = names.map((name) => topicRow(name, topics[name], filters[name] ?? {})).join("")
      || '<tr><td colspan="3" class="muted empty">No topic has a subscribed queue you may see.</td></tr>';
  });

  $("#subscribe-form", root).addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const topic = form.topic.value;
    const queue = form.queue.value;
    try {
      const { changed } = await api("POST", `/api/v1/topics/${enc(topic)}/subscriptions`, { queue });
      toast(changed ? `${queue} subscribed to ${topic}` : `${queue} was subscribed to ${topic} already`);
      form.reset();
      load();
    } catch (err) {
      toast(`Could not subscribe: ${err.message}`, "error");
    }
  });

  $("#publish-form", root).addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const topic = form.topic.value;
    const data = { body: form.body.value };
    if (form.msgid.value) data.msgid = form.msgid.value;
    try {
      const { jobs } = await api("POST", `/api/v1/topics/${enc(topic)}/publish`, data);
      const queues = Object.keys(jobs);
      $("#published", root).innerHTML = queues.map((queue) => {
        const job = jobs[queue];
        return job.id
          ? `<li><code>${esc(queue)}</code>: <a href="#/job/${enc(job.id)}"><code>${esc(job.id)}</code></a></li>`
          : `<li><code>${esc(queue)}</code>: <span class="error">${esc(job.error.code)} ${esc(job.error.detail)}</span></li>`;
      }).join("") || `<li class="muted">No queue is subscribed to ${esc(topic)}: nothing added.</li>`;
      toast(`Published to ${topic}: ${num(queues.length)} job${queues.length === 1 ? "" : "s"}`);
    } catch (err) {
      toast(`Could not publish: ${err.message}`, "error");
    }
  });

  load();
  return { update: load, loadJobs: load };
}
