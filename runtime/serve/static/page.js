// coworker's page: the one script. It only adds the messages and replies written since the
// page loaded (GET /said?after=N every few seconds), as text (textContent, never HTML).
// Without it the page reads and acts the same; a reload shows what is new.
"use strict";

(function () {
  var list = document.getElementById("said");
  if (!list) { return; }
  var last = parseInt(list.getAttribute("data-last") || "0", 10) || 0;
  var every = 2000;

  function line(s) {
    var li = document.createElement("li");
    li.className = s.side;
    li.id = "e" + s.id;
    var meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = "#" + s.id + " " + s.when + " " + s.who +
      (s.in_reply_to.length ? " (to #" + s.in_reply_to.join(", #") + ")" : "");
    li.appendChild(meta);
    if (s.subject) {
      var subject = document.createElement("div");
      subject.className = "subject";
      subject.textContent = s.subject;
      li.appendChild(subject);
    }
    var text = document.createElement("div");
    text.className = "text";
    text.textContent = s.text;
    li.appendChild(text);
    return li;
  }

  function poll() {
    fetch("/said?after=" + last, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : { said: [] }; })
      .then(function (data) {
        data.said.forEach(function (s) {
          if (document.getElementById("e" + s.id)) { return; }
          var empty = list.querySelector("li.empty");
          if (empty) { empty.remove(); }
          list.appendChild(line(s));
          last = Math.max(last, s.id);
        });
      })
      .catch(function () {})
      .then(function () { setTimeout(poll, every); });
  }
  setTimeout(poll, every);
})();
