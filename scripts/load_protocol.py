"""load_mixed.py's protocol client: a session speaks Streamlit 1.67's own browser protocol (BackMsg and ForwardMsg
protobufs over the websocket /_stcore/stream, uploads by HTTP PUT), so it costs the machine almost nothing and its
waits measure the server, not a browser drawing the page. What it mirrors of the frontend is read from Streamlit's
source (runtime/app_session.py, web/server/starlette/*.py, testing/v1/element_tree.py for the widget values).
Not mirrored: the page's static files, host-config and heartbeat requests, and drawing (none of them reruns).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path

import requests
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import connect

SIDEBAR = 1  # a delta path's first index: 0 the main area, 1 the sidebar
ENDED = (ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_WITH_COMPILE_ERROR)  # early-for-rerun: st.rerun goes on
CAUGHT = "Something went wrong"  # how ui.widgets.friendly_errors shows an unexpected exception (no traceback)
XSRF_COOKIE = "_streamlit_xsrf"  # set by /_stcore/health; an upload PUT echoes it in X-Xsrftoken (double submit)


@dataclass(frozen=True)
class Widget:
    """A widget the last run drew: its element kind (the Element oneof: slider, selectbox...) and message."""

    id: str
    kind: str
    label: str
    in_sidebar: bool
    proto: object


def drawn_state(w: Widget) -> WidgetState | None:
    """The value the frontend registers for a widget it draws: the one the server set, else the default.
    None for a widget that holds no value until used (buttons, uploaders): the frontend sends none either."""
    p, state = w.proto, WidgetState(id=w.id)
    if w.kind == "slider" and p.type == p.SELECT_SLIDER:  # its options' labels, its default as their indices
        state.string_array_value.data[:] = p.raw_value if p.set_value else [p.options[int(i)] for i in p.default]
    elif w.kind == "slider":
        state.double_array_value.data[:] = p.value if p.set_value else p.default
    elif w.kind in ("selectbox", "radio"):
        if p.set_value and p.HasField("raw_value"):
            state.string_value = p.raw_value
        elif not p.set_value and p.HasField("default"):
            state.string_value = p.options[p.default]
        else:
            return None
    elif w.kind == "checkbox":  # toggles too
        state.bool_value = p.value if p.set_value else p.default
    elif w.kind == "number_input":
        state.double_value = p.value if p.set_value else p.default
    elif w.kind in ("text_input", "text_area"):
        state.string_value = p.value if p.set_value else p.default
    elif w.kind == "multiselect":
        state.string_array_value.data[:] = p.raw_values if p.set_value else [p.options[int(i)] for i in p.default]
    else:
        return None
    return state


def slider_moved(w: Widget, value: float, steps: float) -> float:
    """`steps` of the slider's step from `value`, the other way where that leaves the range (a visible change)."""
    moved = value + steps * w.proto.step
    if not w.proto.min <= moved <= w.proto.max:
        moved = value - steps * w.proto.step
    return min(max(moved, w.proto.min), w.proto.max)


def tenth_of_range(w: Widget) -> float:
    """PageUp/PageDown in the browser: a tenth of the range, in whole steps (at least one)."""
    return max(1, round((w.proto.max - w.proto.min) / 10 / w.proto.step))


class Session:
    """One visitor: a websocket to the server, the widgets its last run drew and the values it holds for them."""

    def __init__(self, http_url: str, timeout_s: float) -> None:
        self.http_url, self.timeout_s = http_url, timeout_s
        self.ws = None
        self.session_id = self.page_hash = self.query_string = ""
        self.widgets: dict[str, Widget] = {}  # drawn in the last run
        self.values: dict[str, WidgetState] = {}  # what the frontend would send
        self.cache: dict[str, ForwardMsg] = {}  # the frontend's message cache: the server sends repeats by hash
        self.errors: list[str] = []
        self._run_widgets: dict[str, Widget] = {}
        self._run_started = False

    async def open(self, page: str) -> None:
        """Connect and run `page` (a url path) as a browser's first message does; returns when the run has ended."""
        ws_url = self.http_url.replace("http://", "ws://") + "/_stcore/stream"
        # no keepalive pings (a browser sends none; a busy server answering late would close the socket)
        self.ws = await connect(ws_url, subprotocols=["streamlit"], max_size=None, ping_interval=None)
        await self.rerun(page_name=page)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def rerun(self, page_name: str = "") -> None:
        """Send a rerun with every widget's value, as the frontend does after any change, and wait for its end."""
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string, state.page_name = self.query_string, page_name
        state.page_script_hash = "" if page_name else self.page_hash
        state.widget_states.widgets.extend(self.values.values())
        state.cached_message_hashes.extend(self.cache)
        state.context_info.timezone, state.context_info.locale = "UTC", "en-US"
        self._run_started = False  # a finish counts once a run of this request has started
        await self.ws.send(msg.SerializeToString())
        await self._read_until(self._ended)

    def _ended(self, msg: ForwardMsg) -> bool:
        return self._run_started and msg.HasField("script_finished") and msg.script_finished in ENDED

    async def _read_until(self, done) -> ForwardMsg:
        """Handle the server's messages until `done(msg)`; bounded by the session's timeout."""
        async with asyncio.timeout(self.timeout_s):
            while True:
                msg = ForwardMsg()
                msg.ParseFromString(await self.ws.recv())
                msg = self._handle(msg)
                if done(msg):
                    return msg

    def _handle(self, msg: ForwardMsg) -> ForwardMsg:
        """Follow the page as the frontend does: run starts, drawn widgets, the URL's query string, exceptions."""
        if msg.HasField("ref_hash"):  # a message this session holds: the server sent its hash and a new place
            held = ForwardMsg()
            held.CopyFrom(self.cache[msg.ref_hash])
            held.metadata.CopyFrom(msg.metadata)
            msg = held
        kind = msg.WhichOneof("type")
        if msg.metadata.cacheable:
            self.cache[msg.hash] = msg
        if kind == "new_session":
            self.session_id = msg.new_session.initialize.session_id or self.session_id
            self.page_hash = msg.new_session.page_script_hash
            self._run_widgets, self._run_started = {}, True
        elif kind == "navigation":  # with st.navigation the page's own hash comes here, not in new_session
            self.page_hash = msg.navigation.page_script_hash
        elif kind == "page_info_changed":
            self.query_string = msg.page_info_changed.query_string
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            self._drawn(msg)
        elif kind == "script_finished" and msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
            self.widgets = self._run_widgets  # the frontend drops the values of widgets the run did not draw
            self.values = {i: v for i, v in self.values.items() if i in self.widgets}
        elif kind == "session_event" and msg.session_event.HasField("script_compilation_exception"):
            self.errors.append(f"compile error: {msg.session_event.script_compilation_exception.message}")
        return msg

    def _drawn(self, msg: ForwardMsg) -> None:
        element = msg.delta.new_element
        kind = element.WhichOneof("type")
        if kind == "exception":
            self.errors.append(f"exception shown: {element.exception.type}: {element.exception.message[:80]}")
            return
        if kind == "alert" and element.alert.body.startswith(CAUGHT):
            self.errors.append(f"error shown: {element.alert.body[:100]}")
            return
        proto = getattr(element, kind)
        if not getattr(proto, "id", ""):
            return
        w = Widget(proto.id, kind, getattr(proto, "label", ""), msg.metadata.delta_path[0] == SIDEBAR, proto)
        self._run_widgets[w.id] = w
        if w.id not in self.values or getattr(proto, "set_value", False):  # else the frontend keeps its own value
            state = drawn_state(w)
            if state is None:
                self.values.pop(w.id, None)
            else:
                self.values[w.id] = state

    def widget(self, kind: str, label: str, *, sidebar: bool | None = None, exact: bool = True) -> Widget:
        """The drawn widget of this kind whose label is (or, not exact, contains) `label`."""
        for w in self.widgets.values():
            named = w.label == label if exact else label in w.label
            if w.kind == kind and named and sidebar in (None, w.in_sidebar):
                return w
        raise LookupError(f"no {kind} {label!r} drawn")

    def value(self, w: Widget) -> float | str:
        """The value this session holds for a slider (its one thumb) or a selectbox."""
        state = self.values[w.id]
        return state.double_array_value.data[0] if w.kind == "slider" else state.string_value

    async def set(self, state: WidgetState) -> None:
        """A person's change of one widget: its new value, then the rerun the frontend sends."""
        self.values[state.id] = state
        await self.rerun()

    async def set_slider(self, w: Widget, value: float) -> None:
        await self.set(WidgetState(id=w.id, double_array_value={"data": [value]}))

    async def select(self, w: Widget, option: str) -> None:
        await self.set(WidgetState(id=w.id, string_value=option))

    def take_errors(self) -> list[str]:
        """The errors shown since the last call."""
        errors, self.errors = self.errors, []
        return errors

    async def upload(self, uploader: Widget, path: Path) -> None:
        """The file uploader's flow: ask for an upload url, PUT the file there, rerun with the uploader's files."""
        request = BackMsg()
        request.file_urls_request.request_id = str(uuid.uuid4())
        request.file_urls_request.file_names.append(path.name)
        request.file_urls_request.session_id = self.session_id
        await self.ws.send(request.SerializeToString())
        asked = request.file_urls_request.request_id
        answer = await self._read_until(lambda m: m.file_urls_response.response_id == asked)
        if answer.file_urls_response.error_msg:
            raise RuntimeError(answer.file_urls_response.error_msg)
        urls = answer.file_urls_response.file_urls[0]
        data = path.read_bytes()
        await asyncio.to_thread(self._put, urls.upload_url, path.name, data)
        state = WidgetState(id=uploader.id)
        held = self.values.get(uploader.id)
        if held is not None and uploader.proto.multiple_files:  # a multi-file uploader adds to what it holds
            state.CopyFrom(held)
        info = state.file_uploader_state_value.uploaded_file_info.add()
        info.name, info.size, info.file_id = path.name, len(data), urls.file_id
        info.file_urls.CopyFrom(urls)
        if not uploader.proto.multiple_files:
            del state.file_uploader_state_value.uploaded_file_info[:-1]
        await self.set(state)

    def _put(self, upload_url: str, name: str, data: bytes) -> None:
        """The PUT the frontend sends, with the XSRF cookie the server hands out and its echo in the header."""
        with requests.Session() as http:
            http.get(f"{self.http_url}/_stcore/health", timeout=self.timeout_s)
            token = http.cookies.get(XSRF_COOKIE, "")
            reply = http.put(
                f"{self.http_url}{upload_url}",
                files={"file": (name, data, "application/octet-stream")},
                headers={"X-Xsrftoken": token} if token else {},
                timeout=self.timeout_s,
            )
            reply.raise_for_status()
