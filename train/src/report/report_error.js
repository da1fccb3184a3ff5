window.onerror = function (message, source, line, column, error) {
  var box = document.getElementById('report-error');
  box.style.display = 'block';
  box.textContent = 'The report\'s script failed, so its plots are incomplete: ' + message +
      (line ? ' (line ' + line + ':' + column + ')' : '') + (error && error.stack ? '\n' + error.stack : '');
  document.body.dataset.rendered = 'error';
};
