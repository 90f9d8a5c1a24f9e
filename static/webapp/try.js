// A Try it session's page (issue 48): while the session is live its view comes over /ws/try/<id>/
// (webapp/live/try_channel.py), the server's rendering of the same partial a reload shows, swapped in as each
// message arrives, so the answers grow token by token. The partial's htmx polling stands in only while the
// socket is not open (before it connects, between reconnects, or refused); an open socket cancels each poll.
(function () {
  const REFUSED = new Set([4401, 4403, 4404]);  // no access: reconnecting would be refused again
  let socket = null;
  let retry = 500;

  const view = () => document.getElementById("try-session");
  const open = () => socket !== null && socket.readyState === WebSocket.OPEN;

  function swap(html) {
    const old = view();
    if (!old) return;
    const opened = Array.from(old.querySelectorAll("details")).map((d) => d.open);  // a person's open details stay open
    const holder = document.createElement("div");
    holder.innerHTML = html;
    const fresh = holder.firstElementChild;
    if (!fresh) return;
    fresh.querySelectorAll("details").forEach((d, i) => { if (opened[i]) d.open = true; });
    old.replaceWith(fresh);
    if (window.htmx) window.htmx.process(fresh);  // its polling (the fallback) and forms, as a swap by htmx
  }

  function connect() {
    const el = view();
    if (!el || !el.dataset.live) return;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/try/" + el.dataset.session + "/");
    socket.onopen = () => { retry = 500; };
    socket.onmessage = (e) => {
      const message = JSON.parse(e.data);
      swap(message.html);
      if (!message.live) socket.close(1000);  // finished: nothing more will change without a person's action
    };
    socket.onclose = (e) => {
      socket = null;
      if (REFUSED.has(e.code) || e.code === 1000) return;
      setTimeout(connect, retry);  // a reconnect is sent the session as it is now: nothing is missed
      retry = Math.min(retry * 2, 10000);
    };
  }

  document.body.addEventListener("htmx:beforeRequest", (e) => {
    if (open() && e.detail.elt && e.detail.elt.id === "try-session") e.preventDefault();
  });
  connect();
})();
